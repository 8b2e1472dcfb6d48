// PLACEHOLDER: kernels land with their op family.
