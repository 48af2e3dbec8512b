package ingress

// StatusOf exposes statusOf to the package's external tests.
var StatusOf = statusOf
