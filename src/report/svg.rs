//! Figures as inline SVG, drawn with plotters' SVG backend: the per-model heatmaps in the
//! style of the paper's Fig. 1/2 and the contamination-vs-accuracy scatter plot.
//!
//! plotters escapes every text and attribute it writes, so untrusted labels cannot break
//! out of the SVG. Output is a pure function of the inputs (no ids, no timestamps).

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// Draws with `draw` into a fresh SVG document of `size` pixels. Drawing into a String
/// cannot fail, so an error here is a bug.
pub(crate) fn render<E: std::fmt::Debug>(
    size: (u32, u32),
    draw: impl for<'a> FnOnce(&DrawingArea<SVGBackend<'a>, plotters::coord::Shift>) -> Result<(), E>,
) -> String {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        draw(&root).expect("drawing into a String cannot fail");
        root.present().expect("drawing into a String cannot fail");
    }
    svg
}

/// The state of one heatmap square.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Square {
    /// Contamination detected (the paper's green squares).
    Passed,
    NotPassed,
    /// The test could not run on this dataset (e.g. wine, tests 5–6): counts as not passed.
    Skipped,
    /// No result for this cell.
    Missing,
}

/// Green of detected cells (the paper's figures), and the knowledge/memorization divider.
const DETECTED: RGBColor = RGBColor(46, 158, 68);
const GRID: RGBColor = RGBColor(170, 170, 170);
const DIVIDER: RGBColor = RGBColor(110, 110, 110);
const SKIPPED: RGBColor = RGBColor(222, 222, 222);
const MISSING: RGBColor = RGBColor(246, 246, 246);
const TEXT: RGBColor = RGBColor(34, 34, 34);

const CELL: i32 = 24;
const LEFT: i32 = 160;
/// Room above the grid for column labels of the longest allowed length (rotated).
const TOP: i32 = 132;
const TITLE: i32 = 26;
/// Generous average advance of a 12 px sans-serif character, and of a 16 px bold one.
const LABEL_CHAR_PX: f64 = 7.5;
const TITLE_CHAR_PX: f64 = 10.0;

/// Labels longer than this are cut in figures (tables show them whole).
const MAX_LABEL_CHARS: usize = 22;

/// One model's heatmap: rows are tests 1–9 (knowledge above the divider, memorization
/// below), columns are datasets. `squares[d][t]` is dataset `d`, test `t + 1`.
pub fn heatmap(
    title: &str,
    test_names: &[String; 9],
    dataset_names: &[String],
    squares: &[[Square; 9]],
) -> String {
    let columns = dataset_names.len().max(1) as i32;
    let width = (LEFT + columns * CELL + 12) as u32;
    let height = (TITLE + column_labels_height(dataset_names) + 9 * CELL + 12) as u32;
    render((width, height), |root| {
        draw_heatmap(root, title, test_names, dataset_names, squares)
    })
}

/// Room above a heatmap's grid for its rotated dataset names: as long as the longest
/// (cut) name, so that short names like `iris` leave no blank band.
fn column_labels_height(dataset_names: &[String]) -> i32 {
    let longest = dataset_names
        .iter()
        .map(|name| cut(name, MAX_LABEL_CHARS).chars().count())
        .max()
        .unwrap_or(0);
    (12 + (longest as f64 * LABEL_CHAR_PX) as i32).clamp(36, TOP)
}

fn draw_heatmap<DB: DrawingBackend>(
    root: &DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    test_names: &[String; 9],
    dataset_names: &[String],
    squares: &[[Square; 9]],
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    root.fill(&WHITE)?;
    let title_style =
        TextStyle::from(("sans-serif", 16).into_font().style(FontStyle::Bold)).color(&TEXT);
    // Cut to the figure's width rather than clipped mid-letter (a one-dataset grid is
    // narrower than most model names; the caption under the figure has the whole label).
    let (width, _) = root.dim_in_pixel();
    let fits = ((width as f64 - 12.0) / TITLE_CHAR_PX) as usize;
    root.draw(&Text::new(
        cut(title, fits.clamp(8, 40)),
        (6, 4),
        title_style.pos(Pos::new(HPos::Left, VPos::Top)),
    ))?;
    let top = TITLE + column_labels_height(dataset_names);
    let label = TextStyle::from(("sans-serif", 12).into_font()).color(&TEXT);
    for (d, name) in dataset_names.iter().enumerate() {
        let x = LEFT + d as i32 * CELL + CELL / 2;
        let style = label
            .transform(FontTransform::Rotate270)
            .pos(Pos::new(HPos::Left, VPos::Center));
        root.draw(&Text::new(cut(name, MAX_LABEL_CHARS), (x, top - 6), style))?;
    }
    for (t, name) in test_names.iter().enumerate() {
        let y = top + t as i32 * CELL + CELL / 2;
        let style = label.pos(Pos::new(HPos::Right, VPos::Center));
        root.draw(&Text::new(
            format!("{} {}", cut(name, MAX_LABEL_CHARS), t + 1),
            (LEFT - 6, y),
            style,
        ))?;
    }
    for (d, column) in squares.iter().enumerate() {
        for (t, square) in column.iter().enumerate() {
            let (x0, y0) = (LEFT + d as i32 * CELL, top + t as i32 * CELL);
            let (x1, y1) = (x0 + CELL, y0 + CELL);
            let fill = match square {
                Square::Passed => DETECTED,
                Square::NotPassed => WHITE,
                Square::Skipped => SKIPPED,
                Square::Missing => MISSING,
            };
            root.draw(&Rectangle::new([(x0, y0), (x1, y1)], fill.filled()))?;
            root.draw(&Rectangle::new([(x0, y0), (x1, y1)], GRID.stroke_width(1)))?;
            match square {
                // A mark as well as the colour: readable in grey print and for colour-blind readers.
                Square::Passed => {
                    let mark =
                        TextStyle::from(("sans-serif", 15).into_font().style(FontStyle::Bold))
                            .color(&WHITE)
                            .pos(Pos::new(HPos::Center, VPos::Center));
                    root.draw(&Text::new("✓", (x0 + CELL / 2, y0 + CELL / 2), mark))?;
                }
                Square::Skipped => {
                    root.draw(&PathElement::new(
                        vec![(x0 + 4, y1 - 4), (x1 - 4, y0 + 4)],
                        DIVIDER.stroke_width(1),
                    ))?;
                }
                Square::Missing | Square::NotPassed => {}
            }
        }
    }
    // The paper's bold grey line between knowledge (tests 1–3) and memorization (4–9).
    let divider_y = top + 3 * CELL;
    root.draw(&PathElement::new(
        vec![
            (LEFT - 4, divider_y),
            (LEFT + squares.len().max(1) as i32 * CELL + 4, divider_y),
        ],
        DIVIDER.stroke_width(3),
    ))?;
    Ok(())
}

/// One point of the scatter plot.
pub struct Point {
    pub label: String,
    pub contamination: f64,
    pub zero_shot: Option<f64>,
    pub one_shot: Option<f64>,
}

const ZERO_SHOT: RGBColor = RGBColor(31, 119, 180);
const ONE_SHOT: RGBColor = RGBColor(214, 39, 40);

/// Contamination (x) against mean 0-shot and 1-shot accuracy (y), one labelled point per
/// model and setting.
pub fn scatter(points: &[Point]) -> String {
    render((640, 440), |root| draw_scatter(root, points))
}

fn draw_scatter<DB: DrawingBackend>(
    root: &DrawingArea<DB, plotters::coord::Shift>,
    points: &[Point],
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(root)
        .margin(14)
        .x_label_area_size(44)
        .y_label_area_size(54)
        .build_cartesian_2d(0f64..1f64, 0f64..1f64)?;
    chart
        .configure_mesh()
        .x_desc("Contamination score")
        .y_desc("Mean accuracy")
        .x_label_formatter(&|x| format!("{x:.1}"))
        .y_label_formatter(&|y| format!("{y:.1}"))
        .max_light_lines(0)
        .bold_line_style(RGBColor(232, 232, 232))
        .draw()?;
    type Value = fn(&Point) -> Option<f64>;
    let settings: [(&str, RGBColor, Value); 2] = [
        ("0-shot", ZERO_SHOT, |p| p.zero_shot),
        ("1-shot", ONE_SHOT, |p| p.one_shot),
    ];
    for (name, colour, value) in settings {
        chart
            .draw_series(points.iter().filter_map(|p| {
                Some(Circle::new(
                    (p.contamination, value(p)?),
                    4,
                    colour.filled(),
                ))
            }))?
            .label(name)
            .legend(move |(x, y)| Circle::new((x + 6, y), 4, colour.filled()));
        let label = TextStyle::from(("sans-serif", 10).into_font()).color(&colour);
        chart.draw_series(points.iter().filter_map(|p| {
            Some(Text::new(
                cut(&p.label, 14),
                (p.contamination + 0.008, value(p)? + 0.012),
                label.clone(),
            ))
        }))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.9))
        .border_style(GRID)
        .draw()?;
    Ok(())
}

/// A label for a figure: control characters blanked, cut at `max_chars`.
pub fn clean_label(text: &str, max_chars: usize) -> String {
    cut(text, max_chars)
}

/// Makes heatmap squares links: `links` holds (dataset column, test row, href) with hrefs
/// (`#anchor` or a relative path) made of ASCII letters, digits and `-_./#` only (others
/// are skipped: an href is written into an attribute unescaped, and no scheme such as
/// `javascript:` can be spelt without `:`). An invisible square over each cell, on top.
/// `dataset_names` are those the heatmap was drawn with (they set where the grid starts).
pub fn link_heatmap(
    svg: &str,
    dataset_names: &[String],
    links: &[(usize, usize, String)],
) -> String {
    let top = TITLE + column_labels_height(dataset_names);
    let mut extra = String::new();
    for (d, t, href) in links {
        if href.is_empty()
            || !href
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./#".contains(c))
        {
            continue;
        }
        let (x, y) = (LEFT + *d as i32 * CELL, top + *t as i32 * CELL);
        extra.push_str(&format!(
            r##"<a href="{href}"><rect x="{x}" y="{y}" width="{CELL}" height="{CELL}" fill="#000" fill-opacity="0"><title>trials</title></rect></a>"##
        ));
    }
    match svg.rfind("</svg>") {
        Some(end) => format!("{}{extra}{}", &svg[..end], &svg[end..]),
        None => svg.to_string(),
    }
}

fn cut(text: &str, max_chars: usize) -> String {
    // Control characters would make the SVG text invalid XML (plotters escapes only markup).
    let clean: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    match clean.char_indices().nth(max_chars) {
        Some((end, _)) => format!("{}…", &clean[..end]),
        None => clean,
    }
}

/// The calibration study's contamination matrix: rows are training conditions (what the
/// checkpoints were trained on), columns datasets tested; a square's shade is the share of
/// contamination cells detected, with the share printed (`None`: no cell).
pub fn rate_matrix(rows: &[String], columns: &[String], rates: &[Vec<Option<f64>>]) -> String {
    let width = (LEFT + columns.len().max(1) as i32 * (CELL * 2) + 20) as u32;
    let height = (TITLE + TOP + rows.len().max(1) as i32 * CELL + 10) as u32;
    render((width, height), |root| {
        draw_rate_matrix(root, rows, columns, rates)
    })
}

fn draw_rate_matrix<DB: DrawingBackend>(
    root: &DrawingArea<DB, plotters::coord::Shift>,
    rows: &[String],
    columns: &[String],
    rates: &[Vec<Option<f64>>],
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    root.fill(&WHITE)?;
    let wide = CELL * 2;
    let title_style =
        TextStyle::from(("sans-serif", 14).into_font().style(FontStyle::Bold)).color(&TEXT);
    root.draw(&Text::new(
        "trained on ↓ · tested →",
        (6, 4),
        title_style.pos(Pos::new(HPos::Left, VPos::Top)),
    ))?;
    let top = TITLE + TOP;
    let label = TextStyle::from(("sans-serif", 12).into_font()).color(&TEXT);
    for (c, name) in columns.iter().enumerate() {
        let x = LEFT + c as i32 * wide + wide / 2;
        let style = label
            .transform(FontTransform::Rotate270)
            .pos(Pos::new(HPos::Left, VPos::Center));
        root.draw(&Text::new(cut(name, MAX_LABEL_CHARS), (x, top - 6), style))?;
    }
    for (r, name) in rows.iter().enumerate() {
        let y = top + r as i32 * CELL + CELL / 2;
        root.draw(&Text::new(
            cut(name, MAX_LABEL_CHARS),
            (LEFT - 6, y),
            label.pos(Pos::new(HPos::Right, VPos::Center)),
        ))?;
        for (c, rate) in rates[r].iter().enumerate() {
            let (x0, y0) = (LEFT + c as i32 * wide, top + r as i32 * CELL);
            let (x1, y1) = (x0 + wide, y0 + CELL);
            let fill = match rate {
                Some(rate) => {
                    let mix = |full: u8| (255.0 - (255.0 - f64::from(full)) * rate) as u8;
                    RGBColor(mix(DETECTED.0), mix(DETECTED.1), mix(DETECTED.2))
                }
                None => MISSING,
            };
            root.draw(&Rectangle::new([(x0, y0), (x1, y1)], fill.filled()))?;
            root.draw(&Rectangle::new([(x0, y0), (x1, y1)], GRID.stroke_width(1)))?;
            if let Some(rate) = rate {
                let colour = if *rate > 0.5 { WHITE } else { TEXT };
                let style = TextStyle::from(("sans-serif", 11).into_font())
                    .color(&colour)
                    .pos(Pos::new(HPos::Center, VPos::Center));
                root.draw(&Text::new(
                    format!("{rate:.2}"),
                    (x0 + wide / 2, y0 + CELL / 2),
                    style,
                ))?;
            }
        }
    }
    Ok(())
}

/// One dose of a dose–response curve: sensitivity with its 95 % interval.
pub struct DosePoint {
    pub dose: f64,
    pub rate: f64,
    pub low: f64,
    pub high: f64,
}

/// Sensitivity (y) against dose in exposures (x) for one test, with Wilson intervals as
/// error bars and the false-positive rate as a dashed horizontal line.
pub fn dose_response(
    title: &str,
    points: &[DosePoint],
    false_positive_rate: Option<f64>,
) -> String {
    render((320, 220), |root| {
        draw_dose_response(root, title, points, false_positive_rate)
    })
}

fn draw_dose_response<DB: DrawingBackend>(
    root: &DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    points: &[DosePoint],
    false_positive_rate: Option<f64>,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    root.fill(&WHITE)?;
    let max_dose = points.iter().map(|p| p.dose).fold(1.0, f64::max);
    let mut chart = ChartBuilder::on(root)
        .caption(cut(title, 36), ("sans-serif", 13))
        .margin(8)
        .x_label_area_size(32)
        .y_label_area_size(40)
        .build_cartesian_2d(0f64..max_dose * 1.1, 0f64..1.05f64)?;
    chart
        .configure_mesh()
        .x_desc("exposures")
        .y_desc("sensitivity")
        // Whole exposures only: fractional ticks would print as repeated integers.
        .x_label_formatter(&|x| {
            if (x - x.round()).abs() < 1e-9 {
                format!("{x:.0}")
            } else {
                String::new()
            }
        })
        .y_label_formatter(&|y| format!("{y:.1}"))
        .max_light_lines(0)
        .bold_line_style(RGBColor(232, 232, 232))
        .draw()?;
    if let Some(fp) = false_positive_rate {
        // Dashes drawn as short segments (plotters' line series are not compiled in).
        let end = max_dose * 1.1;
        let dash = end / 40.0;
        chart.draw_series((0..20).map(|i| {
            let x0 = i as f64 * 2.0 * dash;
            PathElement::new(vec![(x0, fp), (x0 + dash, fp)], ONE_SHOT.stroke_width(1))
        }))?;
    }
    for p in points {
        chart.draw_series(std::iter::once(PathElement::new(
            vec![(p.dose, p.low), (p.dose, p.high)],
            ZERO_SHOT.stroke_width(1),
        )))?;
    }
    chart.draw_series(std::iter::once(PathElement::new(
        points.iter().map(|p| (p.dose, p.rate)).collect::<Vec<_>>(),
        ZERO_SHOT.stroke_width(2),
    )))?;
    chart.draw_series(
        points
            .iter()
            .map(|p| Circle::new((p.dose, p.rate), 3, ZERO_SHOT.filled())),
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tests_named() -> [String; 9] {
        std::array::from_fn(|t| format!("Test {}", t + 1))
    }

    /// `width="…"` of the root element.
    fn root_width(svg: &str) -> i32 {
        let at = svg.find("width=\"").unwrap() + 7;
        svg[at..].split('"').next().unwrap().parse().unwrap()
    }

    /// A one-dataset heatmap cuts its model's name to its width, starts its grid right
    /// under a short dataset name, and its links cover the drawn squares exactly.
    #[test]
    fn a_narrow_heatmap_fits_its_title_and_links_land_on_its_squares() {
        let title = "SmolLM2 135M Instruct (Q4_1), chat template";
        let datasets = vec!["iris".to_string()];
        let squares = [[Square::NotPassed; 9]];
        let svg = heatmap(title, &tests_named(), &datasets, &squares);
        let width = root_width(&svg);
        assert_eq!(width, LEFT + CELL + 12);
        let fits = ((width - 12) as f64 / TITLE_CHAR_PX) as usize;
        let shown = cut(title, fits);
        assert!(shown.ends_with('…') && svg.contains(&*shown), "{shown}");
        let top = TITLE + column_labels_height(&datasets);
        assert!(top < TITLE + TOP, "a short name leaves no blank band");
        let drawn = format!("x=\"{LEFT}\" y=\"{top}\" width=\"{CELL}\" height=\"{CELL}\"");
        assert!(svg.contains(&drawn), "first square at ({LEFT}, {top})");
        let linked = link_heatmap(
            &svg,
            &datasets,
            &[
                (0, 0, "#cell-1".into()),
                (0, 1, "javascript:alert(1)".into()),
                (0, 2, "\"><script>".into()),
            ],
        );
        assert_eq!(
            linked.matches("<a href").count(),
            1,
            "unsafe hrefs are skipped"
        );
        assert!(
            linked.contains(&format!(
                "<a href=\"#cell-1\"><rect x=\"{LEFT}\" y=\"{top}\" width=\"{CELL}\""
            )),
            "{}",
            &linked[linked.len() - 300..]
        );
        // The longest allowed name still gets the full band.
        let long = vec!["a-dataset-with-a-very-long-name".to_string()];
        assert_eq!(column_labels_height(&long), TOP);
    }
}
