package main

import (
	"encoding/csv"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Table is one Markdown table of the report.
type Table struct {
	ID     string // stable name: "pack-size", "kv", "limit-copy", ...
	Title  string
	Intro  string // a sentence above the table: what was measured, how
	Header []string
	Rows   [][]string
	Notes  []string // lines under the table (crossover, skipped engines)
}

// Record is one measured series point, the unit of the CSV.
type Record struct {
	Suite, Table, Row, Series string
	Unit                      string // "s" (seconds per batch) or "B/s"
	Dist                      Dist
	Bytes                     int64 // payload bytes per batch, 0 if not meaningful
}

// Report is everything one Run measured.
type Report struct {
	Machine []string // header lines
	Tables  []*Table
	Records []Record
	Notes   []string // run-wide notes (skipped engines, missing tools)
	// SizeSweep is the pack object-size sweep, for the plot.
	SizeSweep []sweepPoint
}

// Table returns the table with id, or nil.
func (r *Report) Table(id string) *Table {
	for _, t := range r.Tables {
		if t.ID == id {
			return t
		}
	}
	return nil
}

func (r *Report) note(format string, args ...any) {
	r.Notes = append(r.Notes, fmt.Sprintf(format, args...))
}

// WriteMarkdown writes the machine header, every table and the notes.
func (r *Report) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	b.WriteString("### Machine\n\n")
	for _, l := range r.Machine {
		fmt.Fprintf(&b, "- %s\n", l)
	}
	for _, t := range r.Tables {
		fmt.Fprintf(&b, "\n### %s\n\n", t.Title)
		if t.Intro != "" {
			fmt.Fprintf(&b, "%s\n\n", t.Intro)
		}
		writeRow(&b, t.Header)
		sep := make([]string, len(t.Header))
		for i := range sep {
			sep[i] = "---"
			if i > 0 {
				sep[i] = "---:"
			}
		}
		writeRow(&b, sep)
		for _, row := range t.Rows {
			writeRow(&b, row)
		}
		if len(t.Notes) > 0 {
			b.WriteString("\n")
			for _, n := range t.Notes {
				fmt.Fprintf(&b, "%s\n", n)
			}
		}
	}
	if len(r.Notes) > 0 {
		b.WriteString("\n### Notes\n\n")
		for _, n := range r.Notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func writeRow(b *strings.Builder, cells []string) {
	b.WriteString("|")
	for _, c := range cells {
		b.WriteString(" ")
		b.WriteString(strings.ReplaceAll(c, "|", `\|`))
		b.WriteString(" |")
	}
	b.WriteString("\n")
}

// WriteCSV writes one line per record: the medians and ranges behind the
// tables, in seconds or bytes per second, unrounded.
func (r *Report) WriteCSV(w io.Writer) error {
	cw := csv.NewWriter(w)
	if err := cw.Write([]string{"suite", "table", "row", "series", "unit", "median", "min", "max", "reps", "bytes_per_batch"}); err != nil {
		return err
	}
	g := func(x float64) string { return strconv.FormatFloat(x, 'g', 6, 64) }
	for _, rec := range r.Records {
		if err := cw.Write([]string{rec.Suite, rec.Table, rec.Row, rec.Series, rec.Unit,
			g(rec.Dist.Median), g(rec.Dist.Min), g(rec.Dist.Max), strconv.Itoa(rec.Dist.N), strconv.FormatInt(rec.Bytes, 10)}); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}
