//go:build !race

package subscribers

const raceEnabled = false
