//! SVG plots of a simulated run: throughput, latency, history, redo fill, undo size and
//! every knob over time. plotters with its SVG backend only (no font libraries: text is
//! emitted as SVG text), used by `innopilot simulate --out` and never by the daemon.
//!
//! Long runs are reduced to at most [`MAX_POINTS`] points per series by keeping the
//! minimum and the maximum of each bucket, so a one-second stall in a day-long run
//! still shows.

use std::path::{Path, PathBuf};

use plotters::prelude::*;

use super::model::Second;
use super::run::{run_knobs, SimRun};
use super::SimError;

/// Points per series at most.
pub const MAX_POINTS: usize = 2000;

const COLORS: [RGBColor; 4] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
];

/// Min/max envelope of `pts` in at most `MAX_POINTS` points.
fn reduce(pts: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
    if pts.len() <= MAX_POINTS {
        return pts;
    }
    let per = pts.len().div_ceil(MAX_POINTS / 2);
    let mut out = Vec::with_capacity(MAX_POINTS + 2);
    for chunk in pts.chunks(per) {
        let lo = chunk.iter().copied().min_by(|a, b| a.1.total_cmp(&b.1));
        let hi = chunk.iter().copied().max_by(|a, b| a.1.total_cmp(&b.1));
        if let (Some(lo), Some(hi)) = (lo, hi) {
            if lo.0 <= hi.0 {
                out.extend([lo, hi]);
            } else {
                out.extend([hi, lo]);
            }
        }
    }
    out
}

struct Series {
    label: String,
    /// Index of the arm (run): its colour.
    arm: usize,
    /// Dashed: a second quantity of the same arm.
    secondary: bool,
    points: Vec<(f64, f64)>,
}

fn series(run: &SimRun, arm: usize, label: &str, f: impl Fn(&Second) -> f64) -> Series {
    Series {
        label: label.to_string(),
        arm,
        secondary: false,
        points: reduce(run.seconds.iter().map(|s| (s.t_s as f64, f(s))).collect()),
    }
}

fn draw_err(path: &Path, e: impl std::fmt::Display) -> SimError {
    SimError::Io {
        what: "cannot draw",
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

/// How the y axis labels its ticks.
#[derive(Clone, Copy)]
enum Axis {
    Plain,
    /// Bytes as KiB, MiB or GiB.
    Bytes,
    /// Counts as k or M.
    Count,
}

/// A tick label a reader takes in at a glance: "1.5 GiB", "250 k", "0.8".
fn tick(axis: Axis, v: f64) -> String {
    let scaled = |v: f64, units: &[(f64, &str)]| {
        for (div, unit) in units {
            if v.abs() >= *div {
                let x = v / div;
                return if x >= 10.0 {
                    format!("{x:.0} {unit}")
                } else {
                    format!("{x:.1} {unit}")
                };
            }
        }
        if v.fract() == 0.0 || v.abs() >= 10.0 {
            format!("{v:.0}")
        } else {
            format!("{v:.2}")
        }
    };
    match axis {
        Axis::Plain => scaled(v, &[]),
        Axis::Bytes => scaled(
            v,
            &[
                (1_073_741_824.0, "GiB"),
                (1_048_576.0, "MiB"),
                (1024.0, "KiB"),
            ],
        ),
        Axis::Count => scaled(v, &[(1e6, "M"), (1e3, "k")]),
    }
}

/// Width of the legend column on the right of every chart: outside the data.
const LEGEND_W: u32 = 190;

fn chart(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    title: &str,
    y_label: &str,
    axis: Axis,
    data: &[Series],
    views: &[(f64, f64)],
    x_max: f64,
) -> Result<(), String> {
    let (w, _) = area.dim_in_pixel();
    let (plot, legend) = area.split_horizontally(w.saturating_sub(LEGEND_W));
    // One y range for every arm: the comparison is only fair on shared axes.
    let y_max = data
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .filter(|y| y.is_finite())
        .fold(0.0, f64::max);
    let y_max = if y_max > 0.0 { y_max * 1.08 } else { 1.0 };
    let mut c = ChartBuilder::on(&plot)
        .caption(title, ("sans-serif", 16))
        .margin(8)
        .x_label_area_size(36)
        .y_label_area_size(84)
        .build_cartesian_2d(0.0..x_max.max(1.0), 0.0..y_max)
        .map_err(|e| e.to_string())?;
    c.configure_mesh()
        .x_desc("virtual time (s)")
        .y_desc(y_label)
        .y_label_formatter(&|v| tick(axis, *v))
        .x_label_formatter(&|v| tick(Axis::Plain, *v))
        .light_line_style(WHITE.mix(0.0))
        .draw()
        .map_err(|e| e.to_string())?;
    // The read views first, under the lines.
    let shade = RGBColor(200, 200, 200).mix(0.35);
    for (start, end) in views {
        c.draw_series(std::iter::once(Rectangle::new(
            [(*start, 0.0), (end.min(x_max.max(1.0)), y_max)],
            shade.filled(),
        )))
        .map_err(|e| e.to_string())?;
    }
    for s in data {
        let color = COLORS[s.arm % COLORS.len()];
        let width = if s.arm == 0 { 2 } else { 1 };
        if s.secondary {
            c.draw_series(DashedLineSeries::new(
                s.points.iter().copied(),
                6,
                4,
                color.stroke_width(width),
            ))
            .map_err(|e| e.to_string())?;
        } else {
            c.draw_series(LineSeries::new(
                s.points.iter().copied(),
                color.stroke_width(width),
            ))
            .map_err(|e| e.to_string())?;
        }
    }
    // The legend, in its own column.
    let style = ("sans-serif", 13).into_font();
    let mut y = 40;
    for s in data {
        let color = COLORS[s.arm % COLORS.len()];
        let line = if s.secondary {
            vec![(8, y), (14, y), (20, y), (26, y)]
        } else {
            vec![(8, y), (30, y)]
        };
        if s.secondary {
            legend
                .draw(&PathElement::new(line[..2].to_vec(), color.stroke_width(2)))
                .map_err(|e| e.to_string())?;
            legend
                .draw(&PathElement::new(line[2..].to_vec(), color.stroke_width(2)))
                .map_err(|e| e.to_string())?;
        } else {
            legend
                .draw(&PathElement::new(line, color.stroke_width(2)))
                .map_err(|e| e.to_string())?;
        }
        legend
            .draw(&Text::new(s.label.clone(), (36, y - 7), style.clone()))
            .map_err(|e| e.to_string())?;
        y += 20;
    }
    if !views.is_empty() {
        legend
            .draw(&Rectangle::new([(8, y - 6), (30, y + 6)], shade.filled()))
            .map_err(|e| e.to_string())?;
        legend
            .draw(&Text::new("read view held", (36, y - 7), style))
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn one(
    dir: &Path,
    file: &str,
    title: &str,
    y_label: &str,
    axis: Axis,
    data: Vec<Series>,
    views: &[(f64, f64)],
    x_max: f64,
) -> Result<PathBuf, SimError> {
    let path = dir.join(file);
    {
        let root = SVGBackend::new(&path, (1000, 380)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| draw_err(&path, e))?;
        chart(&root, title, y_label, axis, &data, views, x_max).map_err(|e| draw_err(&path, e))?;
        root.present().map_err(|e| draw_err(&path, e))?;
    }
    Ok(path)
}

/// Writes the plots of `runs` (the same scenario under one or more policies: the
/// first is the one asked for, drawn thicker) into `dir`, every arm on the same axes,
/// the read views shaded; returns the files written.
pub fn write_svgs(runs: &[&SimRun], dir: &Path) -> Result<Vec<PathBuf>, SimError> {
    let Some(first) = runs.first() else {
        return Ok(Vec::new());
    };
    let x_max = runs
        .iter()
        .filter_map(|r| r.seconds.last())
        .map(|s| s.t_s as f64)
        .fold(1.0, f64::max);
    let views = &first.views;
    let peers: Vec<&str> = runs.iter().map(|r| r.peer.as_str()).collect();
    let who = format!("{} · {}", first.scenario, peers.join(" vs "));
    // One or two quantities per arm; the second one dashed.
    let per_arm = |f: &dyn Fn(&SimRun, usize) -> Vec<Series>| -> Vec<Series> {
        runs.iter().enumerate().flat_map(|(i, r)| f(r, i)).collect()
    };
    let label = |r: &SimRun, what: &str| {
        if runs.len() > 1 {
            format!("{} {what}", r.peer)
        } else {
            what.to_string()
        }
    };
    let secondary = |mut s: Series| {
        s.secondary = true;
        s
    };
    let mut out = vec![
        one(
            dir,
            "throughput.svg",
            &format!("throughput — {who}"),
            "transactions/s",
            Axis::Count,
            per_arm(&|r, i| {
                let mut v = vec![series(r, i, &label(r, "completed"), |s| s.throughput_tps)];
                if i == 0 {
                    v.push(secondary(series(r, i, "offered", |s| s.offered_tps)));
                }
                v
            }),
            views,
            x_max,
        )?,
        one(
            dir,
            "latency.svg",
            &format!("p99 latency proxy — {who}"),
            "ms",
            Axis::Plain,
            per_arm(&|r, i| vec![series(r, i, &label(r, "p99 proxy"), |s| s.latency_p99_ms)]),
            views,
            x_max,
        )?,
        one(
            dir,
            "history.svg",
            &format!("purge debt — {who}"),
            "history (undo logs)",
            Axis::Count,
            per_arm(&|r, i| {
                vec![
                    series(r, i, &label(r, "history"), |s| s.history),
                    secondary(series(r, i, &label(r, "purgeable"), |s| s.purgeable)),
                ]
            }),
            views,
            x_max,
        )?,
        one(
            dir,
            "redo_fill.svg",
            &format!("redo fill (checkpoint age / sync point) — {who}"),
            "ratio (1 = users wait)",
            Axis::Plain,
            per_arm(&|r, i| vec![series(r, i, &label(r, "redo fill"), |s| s.redo_fill)]),
            views,
            x_max,
        )?,
        one(
            dir,
            "undo.svg",
            &format!("undo tablespaces — {who}"),
            "size",
            Axis::Bytes,
            per_arm(&|r, i| vec![series(r, i, &label(r, "undo"), |s| s.undo_bytes)]),
            views,
            x_max,
        )?,
    ];
    let knobs = run_knobs(first);
    if !knobs.is_empty() {
        let path = dir.join("knobs.svg");
        {
            let root = SVGBackend::new(&path, (1000, 220 * knobs.len() as u32)).into_drawing_area();
            root.fill(&WHITE).map_err(|e| draw_err(&path, e))?;
            let areas = root.split_evenly((knobs.len(), 1));
            for (knob, area) in knobs.iter().zip(&areas) {
                let data = per_arm(&|r, i| {
                    vec![series(r, i, &label(r, knob.var_name()), |s| {
                        s.knobs.get(knob).copied().unwrap_or(0) as f64
                    })]
                });
                let axis = if knob.unit() == "bytes" {
                    Axis::Bytes
                } else {
                    Axis::Count
                };
                chart(
                    area,
                    knob.var_name(),
                    knob.unit(),
                    axis,
                    &data,
                    views,
                    x_max,
                )
                .map_err(|e| draw_err(&path, e))?;
            }
            root.present().map_err(|e| draw_err(&path, e))?;
        }
        out.push(path);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tick_labels_are_readable() {
        assert_eq!(tick(Axis::Bytes, 1_610_612_736.0), "1.5 GiB");
        assert_eq!(tick(Axis::Bytes, 64.0 * 1_048_576.0), "64 MiB");
        assert_eq!(tick(Axis::Count, 250_000.0), "250 k");
        assert_eq!(tick(Axis::Count, 2_500_000.0), "2.5 M");
        assert_eq!(tick(Axis::Plain, 0.75), "0.75");
        assert_eq!(tick(Axis::Plain, 120.0), "120");
    }

    #[test]
    fn reduce_keeps_spikes() {
        let mut pts: Vec<(f64, f64)> = (0..100_000).map(|i| (i as f64, 1.0)).collect();
        pts[54_321].1 = 99.0;
        let r = reduce(pts);
        assert!(r.len() <= MAX_POINTS + 2);
        assert!(r.iter().any(|p| p.1 == 99.0));
        assert!(r.windows(2).all(|w| w[0].0 <= w[1].0));
    }
}
