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
    points: Vec<(f64, f64)>,
}

fn series(run: &SimRun, label: &str, f: impl Fn(&Second) -> f64) -> Series {
    Series {
        label: label.to_string(),
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

fn chart(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    title: &str,
    y_label: &str,
    data: &[Series],
    x_max: f64,
) -> Result<(), String> {
    let y_max = data
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .filter(|y| y.is_finite())
        .fold(0.0, f64::max);
    let y_max = if y_max > 0.0 { y_max * 1.08 } else { 1.0 };
    let mut c = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 16))
        .margin(8)
        .x_label_area_size(28)
        .y_label_area_size(64)
        .build_cartesian_2d(0.0..x_max.max(1.0), 0.0..y_max)
        .map_err(|e| e.to_string())?;
    c.configure_mesh()
        .x_desc("virtual time (s)")
        .y_desc(y_label)
        .light_line_style(WHITE.mix(0.0))
        .draw()
        .map_err(|e| e.to_string())?;
    for (i, s) in data.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        c.draw_series(LineSeries::new(
            s.points.iter().copied(),
            color.stroke_width(1),
        ))
        .map_err(|e| e.to_string())?
        .label(s.label.clone())
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], color));
    }
    if data.len() > 1 {
        c.configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn one(
    dir: &Path,
    file: &str,
    title: &str,
    y_label: &str,
    data: Vec<Series>,
    x_max: f64,
) -> Result<PathBuf, SimError> {
    let path = dir.join(file);
    {
        let root = SVGBackend::new(&path, (900, 360)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| draw_err(&path, e))?;
        chart(&root, title, y_label, &data, x_max).map_err(|e| draw_err(&path, e))?;
        root.present().map_err(|e| draw_err(&path, e))?;
    }
    Ok(path)
}

/// Writes the plots of `run` into `dir`; returns the files written.
pub fn write_svgs(run: &SimRun, dir: &Path) -> Result<Vec<PathBuf>, SimError> {
    let x_max = run.seconds.last().map_or(1.0, |s| s.t_s as f64);
    let who = format!("{} · {}", run.scenario, run.peer);
    let mut out = vec![
        one(
            dir,
            "throughput.svg",
            &format!("throughput — {who}"),
            "transactions/s",
            vec![
                series(run, "completed", |s| s.throughput_tps),
                series(run, "offered", |s| s.offered_tps),
            ],
            x_max,
        )?,
        one(
            dir,
            "latency.svg",
            &format!("p99 latency proxy — {who}"),
            "ms",
            vec![series(run, "p99 proxy", |s| s.latency_p99_ms)],
            x_max,
        )?,
        one(
            dir,
            "history.svg",
            &format!("purge debt — {who}"),
            "history records",
            vec![
                series(run, "history", |s| s.history),
                series(run, "purgeable", |s| s.purgeable),
            ],
            x_max,
        )?,
        one(
            dir,
            "redo_fill.svg",
            &format!("redo fill (checkpoint age / sync point) — {who}"),
            "fraction",
            vec![
                series(run, "redo fill", |s| s.redo_fill),
                series(run, "stalled s", |s| s.stalled_s),
            ],
            x_max,
        )?,
        one(
            dir,
            "undo.svg",
            &format!("undo tablespaces — {who}"),
            "MiB",
            vec![series(run, "undo", |s| s.undo_bytes / 1_048_576.0)],
            x_max,
        )?,
    ];
    let knobs = run_knobs(run);
    if !knobs.is_empty() {
        let path = dir.join("knobs.svg");
        {
            let root = SVGBackend::new(&path, (900, 200 * knobs.len() as u32)).into_drawing_area();
            root.fill(&WHITE).map_err(|e| draw_err(&path, e))?;
            let areas = root.split_evenly((knobs.len(), 1));
            for (knob, area) in knobs.iter().zip(&areas) {
                let data = vec![series(run, knob.var_name(), |s| {
                    s.knobs.get(knob).copied().unwrap_or(0) as f64
                })];
                chart(area, knob.var_name(), knob.unit(), &data, x_max)
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
    fn reduce_keeps_spikes() {
        let mut pts: Vec<(f64, f64)> = (0..100_000).map(|i| (i as f64, 1.0)).collect();
        pts[54_321].1 = 99.0;
        let r = reduce(pts);
        assert!(r.len() <= MAX_POINTS + 2);
        assert!(r.iter().any(|p| p.1 == 99.0));
        assert!(r.windows(2).all(|w| w[0].0 <= w[1].0));
    }
}
