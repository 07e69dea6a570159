package main

import (
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// writePlot draws the pack object-size sweep as throughput against object
// size (log x), one line per mode and the copy() limit, into a PNG at path.
func writePlot(path string, pts []sweepPoint) error {
	if len(pts) == 0 {
		return fmt.Errorf("no object-size sweep to plot (run the pack suite with -sizes)")
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Packing %d objects per batch", pts[0].Objects)
	p.X.Label.Text = "object size (bytes)"
	p.Y.Label.Text = "throughput (GB/s, median)"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = sizeTicks(pts)
	p.Y.Min = 0
	p.Add(plotter.NewGrid())
	p.Legend.Top = true

	series := []struct {
		name  string
		dist  func(sweepPoint) Dist
		color color.RGBA
		dash  []vg.Length
	}{
		{"copy() limit", func(s sweepPoint) Dist { return s.Copy }, color.RGBA{A: 255}, []vg.Length{vg.Points(4), vg.Points(3)}},
		{"serial", func(s sweepPoint) Dist { return s.Modes[0] }, color.RGBA{R: 31, G: 119, B: 180, A: 255}, nil},
		{"pool16", func(s sweepPoint) Dist { return s.Modes[1] }, color.RGBA{R: 214, G: 39, B: 40, A: 255}, nil},
		{"size-aware (default)", func(s sweepPoint) Dist { return s.Modes[2] }, color.RGBA{R: 44, G: 160, B: 44, A: 255}, nil},
	}
	top := 0.0
	for _, s := range series {
		xys := make(plotter.XYs, len(pts))
		for j, pt := range pts {
			xys[j] = plotter.XY{X: float64(pt.Size), Y: float64(pt.bytes()) / s.dist(pt).Median / 1e9}
			top = max(top, xys[j].Y)
		}
		line, points, err := plotter.NewLinePoints(xys)
		if err != nil {
			return err
		}
		line.Color, line.Width, line.Dashes = s.color, vg.Points(1.5), s.dash
		points.Color, points.Shape = s.color, draw.CircleGlyph{}
		points.Radius = vg.Points(2.5)
		p.Add(line, points)
		p.Legend.Add(s.name, line, points)
	}
	p.Y.Max = top * 1.3 // room for the legend above the lines
	return p.Save(8*vg.Inch, 5*vg.Inch, path)
}

// sizeTicks labels the measured sizes ("512 B", "8 KiB", ...).
func sizeTicks(pts []sweepPoint) plot.Ticker {
	ticks := make(plot.ConstantTicks, len(pts))
	for i, p := range pts {
		ticks[i] = plot.Tick{Value: float64(p.Size), Label: fmtSize(p.Size)}
	}
	return ticks
}
