// Package version holds berth's version, reported by `berth version`, in node
// fingerprints and as the vendor version of the built-in plugins.
package version
