//! One SVG bar chart per workload: aggregate MB/s of every policy, shared
//! and per-worker side by side; on each bar a black tick at the slowest
//! stream's MB/s (with more than one stream) and, above it, the readahead
//! it wasted in MiB.

use std::path::{Path, PathBuf};

use plotters::prelude::*;

use crate::report::BenchReport;
use rustgt_backstore::ioctx::{ContextMode, ReadaheadPolicy};

const SHARED: RGBColor = RGBColor(31, 119, 180);
const PER_WORKER: RGBColor = RGBColor(255, 127, 14);

/// Writes `<dir>/<workload>.svg` for every workload in the report.
pub(crate) fn write_all(rep: &BenchReport, dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut ids: Vec<&str> = Vec::new();
    for row in &rep.rows {
        if !ids.contains(&row.workload.id.as_str()) {
            ids.push(&row.workload.id);
        }
    }
    let mut paths = Vec::new();
    for id in ids {
        let path = dir.join(format!("{id}.svg"));
        draw(rep, id, &path).map_err(std::io::Error::other)?;
        paths.push(path);
    }
    Ok(paths)
}

fn draw(rep: &BenchReport, id: &str, path: &Path) -> Result<(), String> {
    let rows: Vec<_> = rep.rows.iter().filter(|r| r.workload.id == id).collect();
    let title = rows
        .first()
        .map_or_else(String::new, |r| format!("{id}: {}", r.workload.title));
    let policies: Vec<ReadaheadPolicy> = rep.options.policies.clone();
    let modes: Vec<ContextMode> = rep.options.modes.clone();
    let top = rows
        .iter()
        .map(|r| r.result.aggregate_mb_s())
        .fold(1.0, f64::max)
        * 1.15;
    let root = SVGBackend::new(path, (900, 420)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let n = policies.len();
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .build_cartesian_2d(0f64..n as f64, 0f64..top)
        .map_err(|e| e.to_string())?;
    let names = policies.clone();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n * 2 + 1)
        .x_label_formatter(&|x| {
            let i = x.floor() as usize;
            if (x - i as f64 - 0.5).abs() < 0.26 {
                names.get(i).map_or_else(String::new, |p| p.to_string())
            } else {
                String::new()
            }
        })
        .y_desc("aggregate MB/s (tick: slowest stream; figure: wasted MiB)")
        .draw()
        .map_err(|e| e.to_string())?;
    let width = 0.8 / modes.len().max(1) as f64;
    for (mi, &mode) in modes.iter().enumerate() {
        let color = if mode == ContextMode::Shared {
            SHARED
        } else {
            PER_WORKER
        };
        let bars = policies.iter().enumerate().filter_map(|(pi, &p)| {
            let r = rows.iter().find(|r| r.policy == p && r.mode == mode)?;
            let x0 = pi as f64 + 0.1 + mi as f64 * width;
            Some(Rectangle::new(
                [(x0, 0.0), (x0 + width * 0.95, r.result.aggregate_mb_s())],
                color.filled(),
            ))
        });
        chart
            .draw_series(bars)
            .map_err(|e| e.to_string())?
            .label(mode.to_string())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], color.filled()));
        let bar = |pi: usize| pi as f64 + 0.1 + mi as f64 * width;
        let found = |p: ReadaheadPolicy| rows.iter().find(|r| r.policy == p && r.mode == mode);
        let slowest = policies.iter().enumerate().filter_map(|(pi, &p)| {
            let r = &found(p)?.result;
            if r.stream_bytes.len() < 2 {
                return None;
            }
            let min = (0..r.stream_bytes.len())
                .map(|i| r.stream_mb_s(i))
                .fold(f64::INFINITY, f64::min);
            let x0 = bar(pi);
            Some(PathElement::new(
                vec![(x0, min), (x0 + width * 0.95, min)],
                BLACK.stroke_width(2),
            ))
        });
        chart.draw_series(slowest).map_err(|e| e.to_string())?;
        let wasted = policies.iter().enumerate().filter_map(|(pi, &p)| {
            let r = &found(p)?.result;
            let mib = r.wasted_bytes as f64 / f64::from(1u32 << 20);
            Some(Text::new(
                format!("{mib:.0}"),
                (bar(pi) + width * 0.05, r.aggregate_mb_s() + top * 0.045),
                ("sans-serif", 10),
            ))
        });
        chart.draw_series(wasted).map_err(|e| e.to_string())?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())?;
    Ok(())
}

impl BenchReport {
    /// Writes one SVG per workload into `dir`; returns the paths.
    pub fn write_plots(&self, dir: &Path) -> std::io::Result<Vec<PathBuf>> {
        write_all(self, dir)
    }
}
