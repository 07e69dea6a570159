//go:build race

package tq

const raceEnabled = true
