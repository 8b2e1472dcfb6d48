// PLACEHOLDER: tests land with their op family.
