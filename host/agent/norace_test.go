//go:build !race

package agent

// raceDetector: the tests run without the race detector.
const raceDetector = false
