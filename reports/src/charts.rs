//! The report's charts, drawn with plotters into SVG (inlined in the HTML) and PNG: lines over time with the seeds'
//! min–max band, waits per variant with min–max whiskers, and a compaction search's probes against the SLO. Text is
//! set in DejaVu Sans, shipped in `assets/` (its licence beside it) and registered with plotters' ab_glyph
//! renderer, so the PNGs are the same on every machine; the SVGs name the same family and the HTML report embeds it.

use std::error::Error;
use std::sync::Once;

use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use crate::stats::{SeriesSpread, Spread};

/// The font every chart is set in, as plotters and the SVGs name it.
pub const FONT: &str = "DejaVu Sans";
/// DejaVu Sans 2.37 (Bitstream Vera licence with DejaVu's public-domain changes: assets/DejaVuSans-LICENSE.txt).
pub static FONT_TTF: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");
pub const SIZE: (u32, u32) = (860, 460);
/// The x axes' labels: time, or a fill's arrived demand.
pub const TIME_HOURS: &str = "time (hours)";
pub const ARRIVED: &str = "units arrived (% of the cluster's)";

fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // The file is part of the crate: if it does not parse, the build is broken, not the input.
        if plotters::style::register_font(FONT, FontStyle::Normal, FONT_TTF).is_err() {
            panic!("assets/DejaVuSans.ttf is not a font");
        }
    });
}

/// One chart, drawn the same way into either backend.
#[derive(Clone, Debug)]
pub enum Chart {
    /// Values over time, one line per variant (the seeds' median) with the min–max band.
    Lines { title: String, y_label: String, percent: bool, x_label: String, lines: Vec<(String, SeriesSpread)> },
    /// Waits per variant: for each named percentile, the seeds' median with a min–max whisker.
    Waits { title: String, y_label: String, variants: Vec<(String, Vec<(String, Spread)>)> },
    /// A fill: units allocated (share) against units arrived (% of the cluster's, in `t_hours`), one line per
    /// variant with the min–max band, and the demand's diagonal.
    Fill { title: String, lines: Vec<(String, SeriesSpread)> },
    /// A compaction search: the SLO metric per node count tried, and the SLO.
    Compaction { title: String, x_label: String, y_label: String, slo_seconds: f64, probes: Vec<(u32, Spread)> },
}

/// A chart drawn: its SVG text and PNG bytes.
pub struct Drawn {
    pub svg: String,
    pub png: Vec<u8>,
}

type DrawResult = Result<(), Box<dyn Error>>;

/// Every chart's legend: one font, a light box, where the chart leaves room.
fn draw_legend<'a, DB: DrawingBackend + 'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
    position: SeriesLabelPosition,
) -> DrawResult
where
    DB::ErrorType: 'static,
{
    chart
        .configure_series_labels()
        .label_font((FONT, 13))
        .background_style(WHITE.mix(0.85))
        .border_style(RGBColor(160, 160, 160))
        .position(position)
        .draw()?;
    Ok(())
}

/// Draws `chart` as SVG and as PNG.
pub fn draw(chart: &Chart) -> Result<Drawn, String> {
    register_font();
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        draw_on(&root, chart).map_err(|e| format!("SVG: {e}"))?;
        root.present().map_err(|e| format!("SVG: {e}"))?;
    }
    let mut rgb = vec![0u8; (SIZE.0 * SIZE.1 * 3) as usize];
    {
        let root = BitMapBackend::with_buffer(&mut rgb, SIZE).into_drawing_area();
        draw_on(&root, chart).map_err(|e| format!("PNG: {e}"))?;
        root.present().map_err(|e| format!("PNG: {e}"))?;
    }
    Ok(Drawn { svg, png: encode_png(&rgb)? })
}

fn encode_png(rgb: &[u8]) -> Result<Vec<u8>, String> {
    let mut png = Vec::new();
    let mut encoder = png::Encoder::new(&mut png, SIZE.0, SIZE.1);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header().map_err(|e| format!("PNG: {e}"))?;
    writer.write_image_data(rgb).map_err(|e| format!("PNG: {e}"))?;
    writer.finish().map_err(|e| format!("PNG: {e}"))?;
    Ok(png)
}

fn draw_on<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, chart: &Chart) -> DrawResult
where
    DB::ErrorType: 'static,
{
    root.fill(&WHITE)?;
    match chart {
        Chart::Lines { title, y_label, percent, x_label, lines } => {
            draw_lines(root, title, (x_label, y_label), *percent, lines)
        }
        Chart::Waits { title, y_label, variants } => draw_waits(root, title, y_label, variants),
        Chart::Fill { title, lines } => draw_fill(root, title, lines),
        Chart::Compaction { title, x_label, y_label, slo_seconds, probes } => {
            draw_compaction(root, title, x_label, y_label, *slo_seconds, probes)
        }
    }
}

fn color(index: usize) -> RGBColor {
    // Okabe–Ito: told apart by colour-blind readers too.
    const COLORS: [RGBColor; 8] = [
        RGBColor(0, 114, 178),
        RGBColor(213, 94, 0),
        RGBColor(0, 158, 115),
        RGBColor(204, 121, 167),
        RGBColor(86, 180, 233),
        RGBColor(230, 159, 0),
        RGBColor(0, 0, 0),
        RGBColor(240, 228, 66),
    ];
    COLORS[index % COLORS.len()]
}

/// An axis value without trailing zeros (`100`, `2.5`, `0.25`).
fn axis_number(value: f64) -> String {
    let text = format!("{value:.3}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    if text == "-0" { "0".to_owned() } else { text.to_owned() }
}

fn nice_max(value: f64) -> f64 {
    if value <= 0.0 { 1.0 } else { value * 1.1 }
}

fn draw_lines<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    (x_label, y_label): (&str, &str),
    percent: bool,
    lines: &[(String, SeriesSpread)],
) -> DrawResult
where
    DB::ErrorType: 'static,
{
    let scale = if percent { 100.0 } else { 1.0 };
    let x_max = lines.iter().flat_map(|(_, s)| s.t_hours.last().copied()).fold(0.0, f64::max).max(1e-9);
    let y_top = lines.iter().flat_map(|(_, s)| s.max.iter().copied()).fold(0.0, f64::max) * scale;
    let y_max = if percent { 100.0 } else { nice_max(y_top) };
    let mut chart = ChartBuilder::on(root)
        .caption(title, (FONT, 20))
        .margin(14)
        .x_label_area_size(46)
        .y_label_area_size(64)
        .build_cartesian_2d(0f64..x_max, 0f64..y_max)?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .y_label_formatter(&|y| axis_number(*y))
        .x_label_formatter(&|x| axis_number(*x))
        .label_style((FONT, 13))
        .axis_desc_style((FONT, 14))
        .light_line_style(RGBColor(235, 235, 235))
        .draw()?;
    draw_spreads(&mut chart, lines, scale, None)?;
    draw_legend(&mut chart, SeriesLabelPosition::UpperRight)?;
    Ok(())
}

/// Each line's min–max band and its median (from `start`, when given), its values times `scale`.
fn draw_spreads<DB: DrawingBackend>(
    chart: &mut ChartContext<'_, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>,
    lines: &[(String, SeriesSpread)],
    scale: f64,
    start: Option<(f64, f64)>,
) -> DrawResult
where
    DB::ErrorType: 'static,
{
    // The bands overlap: the more lines, the fainter each, so the medians stay readable.
    let band_alpha = (0.45 / lines.len().max(1) as f64).clamp(0.06, 0.15);
    for (index, (name, spread)) in lines.iter().enumerate() {
        let c = color(index);
        let upper = spread.t_hours.iter().zip(&spread.max).map(|(x, v)| (*x, v * scale));
        let lower = spread.t_hours.iter().zip(&spread.min).rev().map(|(x, v)| (*x, v * scale));
        chart.draw_series(std::iter::once(Polygon::new(upper.chain(lower).collect::<Vec<_>>(), c.mix(band_alpha))))?;
        let median = start.into_iter().chain(spread.t_hours.iter().zip(&spread.p50).map(|(x, v)| (*x, v * scale)));
        chart
            .draw_series(LineSeries::new(median, c.stroke_width(2)))?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2)));
    }
    Ok(())
}

fn draw_fill<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    lines: &[(String, SeriesSpread)],
) -> DrawResult
where
    DB::ErrorType: 'static,
{
    let x_max = lines.iter().flat_map(|(_, s)| s.t_hours.last().copied()).fold(100.0, f64::max);
    let mut chart = ChartBuilder::on(root)
        .caption(title, (FONT, 20))
        .margin(14)
        .x_label_area_size(46)
        .y_label_area_size(64)
        .build_cartesian_2d(0f64..x_max, 0f64..100.0)?;
    chart
        .configure_mesh()
        .x_desc(ARRIVED)
        .y_desc("units allocated (%)")
        .y_label_formatter(&|y| axis_number(*y))
        .x_label_formatter(&|x| axis_number(*x))
        .label_style((FONT, 13))
        .axis_desc_style((FONT, 14))
        .light_line_style(RGBColor(235, 235, 235))
        .draw()?;
    let grey = RGBColor(120, 120, 120);
    let demand = [(0.0, 0.0), (100.0, 100.0), (x_max, 100.0)];
    chart
        .draw_series(DashedLineSeries::new(demand, 6, 4, grey.stroke_width(1)))?
        .label("demand")
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], grey.stroke_width(1)));
    // A fill starts from an empty cluster: each median starts at the origin.
    draw_spreads(&mut chart, lines, 100.0, Some((0.0, 0.0)))?;
    draw_legend(&mut chart, SeriesLabelPosition::LowerRight)?;
    Ok(())
}

fn draw_waits<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    y_label: &str,
    variants: &[(String, Vec<(String, Spread)>)],
) -> DrawResult
where
    DB::ErrorType: 'static,
{
    let n = variants.len().max(1);
    let y_top = variants.iter().flat_map(|(_, ps)| ps.iter().map(|(_, s)| s.max)).fold(0.0, f64::max);
    let names: Vec<String> = variants.iter().map(|(name, _)| name.clone()).collect();
    let mut chart = ChartBuilder::on(root)
        .caption(title, (FONT, 20))
        .margin(14)
        .x_label_area_size(46)
        .y_label_area_size(64)
        .build_cartesian_2d(-0.5f64..n as f64 - 0.5, 0f64..nice_max(y_top))?;
    chart
        .configure_mesh()
        .x_desc("variant")
        .y_desc(y_label)
        .y_label_formatter(&|y| axis_number(*y))
        .x_labels(n)
        // Variants sit at whole numbers; ticks between them stay blank.
        .x_label_formatter(&|x| {
            let index = x.round();
            if (x - index).abs() > 1e-6 || index < 0.0 {
                String::new()
            } else {
                names.get(index as usize).cloned().unwrap_or_default()
            }
        })
        .label_style((FONT, 13))
        .axis_desc_style((FONT, 14))
        .light_line_style(RGBColor(235, 235, 235))
        .draw()?;
    let kinds = variants.first().map_or(0, |(_, ps)| ps.len());
    for kind in 0..kinds {
        let c = color(kind);
        let offset = (kind as f64 + 1.0) / (kinds as f64 + 1.0) - 0.5;
        let label = variants[0].1[kind].0.clone();
        let bars = variants.iter().enumerate().map(move |(i, (_, ps))| {
            let s = &ps[kind].1;
            ErrorBar::new_vertical(i as f64 + offset, s.min, s.p50, s.max, c.filled(), 10)
        });
        chart.draw_series(bars)?.label(label).legend(move |(x, y)| Circle::new((x + 9, y), 4, c.filled()));
    }
    draw_legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
    Ok(())
}

fn draw_compaction<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    x_label: &str,
    y_label: &str,
    slo_seconds: f64,
    probes: &[(u32, Spread)],
) -> DrawResult
where
    DB::ErrorType: 'static,
{
    let x_min = probes.iter().map(|(n, _)| *n).min().unwrap_or(0) as f64 - 0.5;
    let x_max = probes.iter().map(|(n, _)| *n).max().unwrap_or(1) as f64 + 0.5;
    let y_top = probes.iter().map(|(_, s)| s.max).fold(slo_seconds, f64::max);
    let mut chart = ChartBuilder::on(root)
        .caption(title, (FONT, 20))
        .margin(14)
        .x_label_area_size(46)
        .y_label_area_size(64)
        .build_cartesian_2d(x_min..x_max, 0f64..nice_max(y_top))?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .y_label_formatter(&|y| axis_number(*y))
        .x_label_formatter(&|x| format!("{x:.0}"))
        .label_style((FONT, 13))
        .axis_desc_style((FONT, 14))
        .light_line_style(RGBColor(235, 235, 235))
        .draw()?;
    let slo_color = color(1);
    chart
        .draw_series(LineSeries::new([(x_min, slo_seconds), (x_max, slo_seconds)], slo_color.stroke_width(2)))?
        .label("SLO")
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], slo_color.stroke_width(2)));
    let c = color(0);
    chart
        .draw_series(
            probes.iter().map(|(n, s)| ErrorBar::new_vertical(*n as f64, s.min, s.p50, s.max, c.filled(), 12)),
        )?
        .label("seeds: median, min–max")
        .legend(move |(x, y)| Circle::new((x + 9, y), 4, c.filled()));
    draw_legend(&mut chart, SeriesLabelPosition::UpperRight)?;
    Ok(())
}
