//go:build race

package agent

// raceDetector: the tests run under the race detector, whose shadow memory
// multiplies the resident size.
const raceDetector = true
