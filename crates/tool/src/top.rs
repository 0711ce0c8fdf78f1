//! `top`: a live terminal view (ratatui over crossterm) of one or more
//! servers. A thread per server polls it every interval (`sample::poll`)
//! and keeps its last two snapshots; the screen shows one row per server
//! and a total, and below it the selected server's details and hottest
//! keys. Keys: `q`/Esc/Ctrl-C quit, arrows and Tab/Shift-Tab select.
//!
//! The screen fits its terminal, 80x24 included: the server column is as
//! wide as the addresses (a longer one keeps its end, the port), the flash
//! and replication columns appear when a server has them, and the other
//! columns are left out, least useful first, until the rest fits; the
//! details pane narrows and the hot keys drop their bytes/s first.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders, Paragraph, Row, Table, TableState};
use ratatui::Frame;

use crate::sample::{poll, Latency, Snapshot, View};

/// The last two polls of one server.
#[derive(Default)]
struct Polls {
    before: Option<Snapshot>,
    now: Option<Snapshot>,
}

/// Starts a poller per address; they stop when `stop` is set.
fn start_pollers(
    addrs: &[String],
    interval: Duration,
    stop: &Arc<AtomicBool>,
) -> Vec<Arc<Mutex<Polls>>> {
    addrs
        .iter()
        .map(|addr| {
            let slot = Arc::new(Mutex::new(Polls::default()));
            let (addr, slot2, stop) = (addr.clone(), slot.clone(), stop.clone());
            thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let started = Instant::now();
                    let snap = poll(&addr);
                    {
                        let mut p = slot2.lock().unwrap_or_else(|e| e.into_inner());
                        p.before = p.now.take();
                        p.now = Some(snap);
                    }
                    // Sleep in short steps so a quit is not held up.
                    while started.elapsed() < interval && !stop.load(Ordering::Relaxed) {
                        thread::sleep(Duration::from_millis(50));
                    }
                }
            });
            slot
        })
        .collect()
}

/// Runs the view until the user quits.
pub(crate) fn run(addrs: Vec<String>, interval: Duration, title: String) -> io::Result<()> {
    let stop = Arc::new(AtomicBool::new(false));
    let slots = start_pollers(&addrs, interval, &stop);
    let mut terminal = ratatui::try_init()?;
    let mut selected = 0usize;
    let result = (|| -> io::Result<()> {
        loop {
            let views: Vec<View> = addrs
                .iter()
                .zip(&slots)
                .map(|(addr, slot)| {
                    let p = slot.lock().unwrap_or_else(|e| e.into_inner());
                    match &p.now {
                        Some(now) => View::new(addr, p.before.as_ref(), now),
                        None => View {
                            addr: crate::conn::normalize(addr),
                            error: Some("connecting".into()),
                            ..View::default()
                        },
                    }
                })
                .collect();
            terminal.draw(|f| draw(f, &title, interval, &views, selected))?;
            if event::poll(Duration::from_millis(250))? {
                if let Event::Key(k) = event::read()? {
                    if k.kind != KeyEventKind::Press {
                        continue;
                    }
                    let n = addrs.len();
                    match k.code {
                        KeyCode::Char('q') | KeyCode::Esc => return Ok(()),
                        KeyCode::Char('c') if k.modifiers.contains(KeyModifiers::CONTROL) => {
                            return Ok(())
                        }
                        KeyCode::Down | KeyCode::Right | KeyCode::Tab | KeyCode::Char('j') => {
                            selected = (selected + 1) % n
                        }
                        KeyCode::Up | KeyCode::Left | KeyCode::BackTab | KeyCode::Char('k') => {
                            selected = (selected + n - 1) % n
                        }
                        _ => {}
                    }
                }
            }
        }
    })();
    stop.store(true, Ordering::Relaxed);
    ratatui::restore();
    result
}

/// `1234567` → `1.2M`.
fn count(x: f64) -> String {
    let a = x.abs();
    if a >= 1e9 {
        format!("{:.1}G", x / 1e9)
    } else if a >= 1e6 {
        format!("{:.1}M", x / 1e6)
    } else if a >= 1e4 {
        format!("{:.1}k", x / 1e3)
    } else if a >= 100.0 || x == x.trunc() {
        format!("{x:.0}")
    } else {
        format!("{x:.1}")
    }
}

/// Bytes in binary units.
fn bytes(b: u64) -> String {
    let b = b as f64;
    if b >= 1024.0 * 1024.0 * 1024.0 {
        format!("{:.1}G", b / (1024.0 * 1024.0 * 1024.0))
    } else if b >= 1024.0 * 1024.0 {
        format!("{:.1}M", b / (1024.0 * 1024.0))
    } else if b >= 1024.0 {
        format!("{:.1}K", b / 1024.0)
    } else {
        format!("{b:.0}B")
    }
}

/// Microseconds as `85us`, `1.2ms`, `2.0s`.
fn micros(us: f64) -> String {
    if us >= 1e6 {
        format!("{:.1}s", us / 1e6)
    } else if us >= 1e3 {
        format!("{:.1}ms", us / 1e3)
    } else {
        format!("{us:.0}us")
    }
}

fn or_dash<T>(v: Option<T>, f: impl FnOnce(T) -> String) -> String {
    v.map_or_else(|| "-".to_string(), f)
}

fn used_of(used: Option<u64>, limit: Option<u64>) -> String {
    match (used, limit) {
        (None, None) => "-".into(),
        (u, l) => format!(
            "{}/{}",
            or_dash(u, bytes),
            or_dash(l.filter(|&l| l > 0), bytes)
        ),
    }
}

/// The table's columns: header, width (the server's is the addresses'),
/// and the order in which a narrow terminal keeps them (0 first).
const COLUMNS: [(&str, u16, u8); 14] = [
    ("Server", 0, 0),
    ("ops/s", 7, 1),
    ("get/s", 7, 8),
    ("set/s", 7, 9),
    ("del/s", 6, 13),
    ("hit%", 5, 2),
    ("p50", 6, 6),
    ("p99", 6, 3),
    ("Memory", 13, 4),
    ("Items", 6, 11),
    ("Flash", 13, 7),
    ("Evict/s", 7, 12),
    ("Conns", 5, 10),
    ("Repl lag", 13, 5),
];
const FLASH: usize = 10;
const REPL: usize = 13;

/// The server column's width: the longest address (or header), at most
/// `cap`.
fn server_width(views: &[View], cap: u16) -> u16 {
    let longest = views
        .iter()
        .map(|v| v.addr.chars().count())
        .max()
        .unwrap_or(0);
    (longest.max("Server".len()) as u16).min(cap.max(6))
}

/// An address cut to `width` keeps its end (the port tells servers apart).
fn fit_addr(addr: &str, width: u16) -> String {
    let n = addr.chars().count();
    let w = usize::from(width);
    if n <= w || w < 2 {
        return addr.to_string();
    }
    let tail: String = addr.chars().skip(n - (w - 1)).collect();
    format!("…{tail}")
}

/// The columns shown in `width` terminal cells, in table order, with
/// their widths: flash and replication only when a server has them, then
/// by `COLUMNS`' order of keeping until the next would not fit.
fn visible(views: &[View], width: u16) -> Vec<(usize, u16)> {
    let server = server_width(views, (width / 3).max(12));
    let has_flash = views.iter().any(|v| v.flash_limit.is_some());
    let has_repl = views.iter().any(|v| v.repl_links.is_some());
    let mut by_rank: Vec<usize> = (0..COLUMNS.len())
        .filter(|&i| (i != FLASH || has_flash) && (i != REPL || has_repl))
        .collect();
    by_rank.sort_by_key(|&i| COLUMNS[i].2);
    let mut shown: Vec<(usize, u16)> = Vec::new();
    let mut used = 0u16;
    for i in by_rank {
        let w = if i == 0 { server } else { COLUMNS[i].1 };
        let need = w + u16::from(!shown.is_empty());
        if used + need > width {
            break;
        }
        used += need;
        shown.push((i, w));
    }
    shown.sort_by_key(|&(i, _)| i);
    shown
}

/// A server's cells under `COLUMNS`.
pub(crate) fn cells(v: &View) -> Vec<String> {
    if !v.up {
        // Why is in the details pane (and in --json's `error`).
        let state = if v.error.as_deref() == Some("connecting") {
            "..."
        } else {
            "DOWN"
        };
        let mut row = vec![v.addr.clone(), state.to_string()];
        row.resize(COLUMNS.len(), "-".to_string());
        return row;
    }
    let lat = |f: fn(&Latency) -> f64| or_dash(v.latency, |l| micros(f(&l)));
    let repl = match (v.repl_links, v.repl_lag_us) {
        (None, _) => "-".to_string(),
        (Some((up, links)), lag) if up < links => {
            format!("{up}/{links} up {}", or_dash(lag, |l| micros(l as f64)))
        }
        (Some(_), lag) => or_dash(lag, |l| micros(l as f64)),
    };
    vec![
        v.addr.clone(),
        count(v.ops),
        count(v.get),
        count(v.set),
        count(v.delete),
        or_dash(v.hit_ratio, |r| format!("{:.1}", r * 100.0)),
        lat(|l| l.p50_us),
        lat(|l| l.p99_us),
        used_of(v.bytes, v.limit_maxbytes),
        or_dash(v.curr_items, |n| count(n as f64)),
        used_of(v.flash_bytes, v.flash_limit),
        count(v.evictions),
        or_dash(v.connections, |n| n.to_string()),
        repl,
    ]
}

/// The table as text, for `--once` without `--json`.
pub(crate) fn text(views: &[View]) -> String {
    let mut out = String::new();
    let mut line = |cells: Vec<String>| {
        let mut l = String::new();
        for (i, c) in cells.iter().enumerate() {
            let w = match i {
                0 => usize::from(server_width(views, 40)),
                _ => COLUMNS.get(i).map_or(0, |c| usize::from(c.1)),
            };
            if i + 1 == cells.len() {
                l.push_str(c);
            } else {
                l.push_str(&format!("{c:<w$} "));
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(COLUMNS.iter().map(|c| c.0.to_string()).collect());
    for v in views {
        line(cells(v));
    }
    line(cells(&View::total(views)));
    out
}

/// The details pane's width and whether the hot keys show bytes/s, for a
/// terminal `width` cells wide.
fn panes(width: u16) -> (u16, bool) {
    let details = if width >= 120 { 52 } else { 40 };
    (details, width.saturating_sub(details) >= 46)
}

fn draw(f: &mut Frame, title: &str, interval: Duration, views: &[View], selected: usize) {
    let total = View::total(views);
    // The details keep 11 rows when the terminal has them.
    let table_height = (views.len() as u16 + 4).min(f.area().height.saturating_sub(12).max(6));
    let [head, table_area, detail_area] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(table_height),
        Constraint::Min(0),
    ])
    .areas(f.area());
    let up = views.iter().filter(|v| v.up).count();
    f.render_widget(
        Paragraph::new(format!(
            "osmium-tool top: {title}  {up}/{} up  every {:.1}s  q quits, arrows select",
            views.len(),
            interval.as_secs_f64()
        )),
        head,
    );
    let bold = Style::default().add_modifier(Modifier::BOLD);
    let shown = visible(views, table_area.width);
    let row = |v: &View| {
        let all = cells(v);
        Row::new(shown.iter().map(|&(i, w)| match i {
            0 => fit_addr(&all[0], w),
            _ => all[i].clone(),
        }))
    };
    let header = Row::new(shown.iter().map(|&(i, _)| COLUMNS[i].0)).style(bold);
    let mut rows: Vec<Row> = views.iter().map(row).collect();
    rows.push(row(&total).style(bold));
    let widths = shown.iter().map(|&(_, w)| Constraint::Length(w));
    let table = Table::new(rows, widths)
        .header(header)
        .block(Block::default().borders(Borders::TOP | Borders::BOTTOM))
        .row_highlight_style(Style::default().add_modifier(Modifier::REVERSED));
    let mut state = TableState::default().with_selected(Some(selected));
    f.render_stateful_widget(table, table_area, &mut state);

    let Some(v) = views.get(selected) else {
        return;
    };
    let (details_width, with_bytes) = panes(detail_area.width);
    let [info, keys] = Layout::horizontal([Constraint::Length(details_width), Constraint::Min(0)])
        .areas(detail_area);
    let lat = |l: Option<Latency>| {
        or_dash(l, |l| {
            format!("p50 {} p99 {}", micros(l.p50_us), micros(l.p99_us))
        })
    };
    let mut lines = vec![
        Line::from(format!("version   {}", v.version.as_deref().unwrap_or("-"))),
        Line::from(format!(
            "uptime    {}",
            or_dash(v.uptime, |u| format!("{u}s"))
        )),
        Line::from(format!(
            "hits/s    {}  misses/s {}",
            count(v.hits),
            count(v.misses)
        )),
        Line::from(format!(
            "incr/s    {}  touch/s {}",
            count(v.incr_decr),
            count(v.touch)
        )),
        Line::from(format!("get       {}", lat(v.latency_get))),
        Line::from(format!("set       {}", lat(v.latency_set))),
        Line::from(format!(
            "flash     {} items",
            or_dash(v.flash_objects, |n| count(n as f64)),
        )),
        Line::from(format!(
            "  read/s  {}  write/s {}",
            or_dash(v.flash_reads, count),
            or_dash(v.flash_writes, count)
        )),
        Line::from(format!(
            "replicas  {}  backlog {}",
            or_dash(v.repl_links, |(u, l)| format!("{u}/{l} up")),
            or_dash(v.repl_backlog, |b| b.to_string())
        )),
    ];
    if let Some(e) = &v.error {
        lines.push(Line::from(format!("error     {e}")));
    }
    let name = fit_addr(&v.addr, info.width.saturating_sub(2));
    f.render_widget(
        Paragraph::new(lines)
            .wrap(ratatui::widgets::Wrap { trim: false })
            .block(Block::default().borders(Borders::ALL).title(name)),
        info,
    );
    let block = Block::default().borders(Borders::ALL).title("Hottest keys");
    match &v.hotkeys {
        None => f.render_widget(
            Paragraph::new("- (the server has no `stats hotkeys`)").block(block),
            keys,
        ),
        Some(rows) => {
            let n = if with_bytes { 5 } else { 4 };
            let rows = rows.iter().map(|h| {
                let mut cells = vec![
                    h.rank.to_string(),
                    h.key.clone(),
                    count(h.reads),
                    count(h.writes),
                    bytes(h.bytes as u64),
                ];
                cells.truncate(n);
                Row::new(cells)
            });
            let mut widths = vec![
                Constraint::Length(3),
                Constraint::Min(8),
                Constraint::Length(8),
                Constraint::Length(8),
                Constraint::Length(8),
            ];
            widths.truncate(n);
            let mut header = vec!["#", "Key", "reads/s", "writes/s", "bytes/s"];
            header.truncate(n);
            let table = Table::new(rows, widths)
                .header(Row::new(header).style(bold))
                .block(block);
            f.render_widget(table, keys);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(count(12.0), "12");
        assert_eq!(count(12.5), "12.5");
        assert_eq!(count(123456.0), "123.5k");
        assert_eq!(bytes(64 * 1024 * 1024), "64.0M");
        assert_eq!(micros(85.2), "85us");
        assert_eq!(micros(1500.0), "1.5ms");
        assert_eq!(used_of(None, None), "-");
        assert_eq!(used_of(Some(1024), Some(0)), "1.0K/-");
        assert_eq!(fit_addr("127.0.0.1:11211", 15), "127.0.0.1:11211");
        assert_eq!(fit_addr("cache-01.example.com:11211", 12), "…e.com:11211");
    }

    #[test]
    fn the_table_fits_80_columns() {
        let view = |addr: &str| View {
            addr: addr.into(),
            up: true,
            ..View::default()
        };
        let views = vec![view("127.0.0.1:11211"), view("127.0.0.1:11212")];
        let shown = visible(&views, 80);
        let width: u16 = shown.iter().map(|&(_, w)| w).sum::<u16>() + shown.len() as u16 - 1;
        assert!(width <= 80, "{width}");
        let names: Vec<&str> = shown.iter().map(|&(i, _)| COLUMNS[i].0).collect();
        for must in ["Server", "ops/s", "hit%", "p50", "p99", "Memory"] {
            assert!(names.contains(&must), "{names:?}");
        }
        assert_eq!(shown[0], (0, 15));
        // No flash tier, no replication: no such columns, however wide.
        let wide: Vec<&str> = visible(&views, 400)
            .iter()
            .map(|&(i, _)| COLUMNS[i].0)
            .collect();
        assert!(
            !wide.contains(&"Flash") && !wide.contains(&"Repl lag"),
            "{wide:?}"
        );
        assert_eq!(wide.len(), COLUMNS.len() - 2);
        assert_eq!(panes(80), (40, false));
        assert_eq!(panes(160), (52, true));
    }
}
