//go:build !race

package tq

const raceEnabled = false
