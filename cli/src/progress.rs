//! Progress on stderr: a one-line bar redrawn in place when stderr is a
//! terminal, plain lines (one per finished measurement) otherwise, as CI
//! logs want; both with the time so far and, once a measurement finished,
//! about how long the rest takes at the pace so far.

use std::io::{IsTerminal, Write};
use std::time::Instant;

pub struct Progress {
    tty: bool,
    total: usize,
    done: usize,
    started: Instant,
    label: String,
    detail: String,
    drawn: bool,
}

fn clock(secs: u64) -> String {
    format!("{}:{:02}", secs / 60, secs % 60)
}

/// The time so far, and the time left at the pace so far once `done` of
/// `total` measurements finished: `1:40, about 3:20 left`.
fn times(elapsed_s: f64, done: usize, total: usize) -> String {
    let so_far = clock(elapsed_s as u64);
    if done == 0 || done >= total {
        return so_far;
    }
    let left = elapsed_s / done as f64 * (total - done) as f64;
    format!("{so_far}, about {} left", clock(left.round() as u64))
}

impl Progress {
    pub fn new(total: usize) -> Progress {
        Progress {
            tty: std::io::stderr().is_terminal(),
            total,
            done: 0,
            started: Instant::now(),
            label: String::new(),
            detail: String::new(),
            drawn: false,
        }
    }

    pub fn elapsed_s(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// Starts a measurement.
    pub fn begin(&mut self, label: &str) {
        self.label = label.to_string();
        self.detail.clear();
        self.draw();
    }

    /// Live detail of the running measurement (e.g. `3 s  812 MB/s`).
    pub fn update(&mut self, detail: String) {
        self.detail = detail;
        self.draw();
    }

    /// Ends a measurement with a one-line summary.
    pub fn finish(&mut self, summary: &str) {
        self.done += 1;
        self.clear();
        if !self.tty {
            say(&format!(
                "bench [{}/{}] ({}) {}: {summary}",
                self.done,
                self.total,
                times(self.elapsed_s(), self.done, self.total),
                self.label
            ));
        }
        self.draw();
    }

    /// A message line (notes, warnings), never interleaved with the bar.
    pub fn note(&mut self, msg: &str) {
        self.clear();
        say(msg);
        self.draw();
    }

    /// Removes the bar before stdout output on the same terminal.
    pub fn clear(&mut self) {
        if self.tty && self.drawn {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[2K");
            let _ = err.flush();
            self.drawn = false;
        }
    }

    fn draw(&mut self) {
        if !self.tty || self.label.is_empty() || self.done >= self.total {
            return;
        }
        const WIDTH: usize = 24;
        let filled = WIDTH * self.done / self.total.max(1);
        let bar: String = "#".repeat(filled) + &".".repeat(WIDTH - filled);
        let mut err = std::io::stderr().lock();
        let _ = write!(
            err,
            "\r\x1b[2K[{bar}] {}/{} {}  {}  {}",
            self.done + 1,
            self.total,
            times(self.elapsed_s(), self.done, self.total),
            self.label,
            self.detail
        );
        let _ = err.flush();
        self.drawn = true;
    }
}

/// One line on stderr. Unlike `eprintln!`, a closed stderr (`bench 2>&1 |
/// head`) is not a panic: the run goes on to clean up after itself.
pub fn say(line: &str) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "{line}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_time_left_follows_the_pace_so_far() {
        assert_eq!(times(65.4, 0, 10), "1:05", "nothing finished: no pace yet");
        assert_eq!(times(100.0, 1, 3), "1:40, about 3:20 left");
        assert_eq!(times(30.0, 3, 4), "0:30, about 0:10 left");
        assert_eq!(times(30.0, 4, 4), "0:30", "all done");
    }
}
