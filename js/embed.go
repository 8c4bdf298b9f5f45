// Package js holds Felix's browser client, an ES module package
// (felix.js, msgpack.js, felix.d.ts) used as it is, with no build step.
// The Go side only embeds the modules, so the admin endpoint serves the
// same files to its live page as a bundler would take from here.
package js

import "embed"

// Modules are felix.js and msgpack.js, served as they are.
//
//go:embed felix.js msgpack.js
var Modules embed.FS
