// PLACEHOLDER: lands with its issue.
