//! `wbcache top`: the `stat` table redrawn every interval on the
//! terminal's alternate screen, until `q`, Ctrl-C, Ctrl-D, SIGTERM or
//! SIGHUP.
//!
//! Invariant: the terminal is left as it was found. The keyboard is read
//! a key at a time without echo while `top` runs (Ctrl-C arrives as a
//! key, not a signal), and [`Terminal`]'s drop restores the saved
//! settings, shows the cursor and leaves the alternate screen, on every
//! way out; a signal that ends `top` only sets a flag its loop checks.

use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};

use super::discover::{caches, none_found};
use super::render;

/// What `top` shows and how often.
pub struct Refresh {
    pub interval_s: f64,
    /// Only this owner's cache.
    pub pid: Option<u32>,
}

/// Set by SIGTERM, SIGHUP or SIGINT: the loop ends and restores the terminal.
static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// The terminal while `top` owns it.
struct Terminal {
    /// Standard input's settings before, when it is a terminal.
    saved: Option<libc::termios>,
}

impl Terminal {
    /// Keys unbuffered and unechoed, the alternate screen, no cursor.
    fn take() -> Terminal {
        // SAFETY: an all-zero termios is a valid value for tcgetattr to fill.
        let mut saved: libc::termios = unsafe { std::mem::zeroed() };
        // SAFETY: tcgetattr fills `saved`, a live termios.
        let saved = (unsafe { libc::tcgetattr(0, &mut saved) } == 0).then_some(saved);
        if let Some(saved) = saved {
            let mut raw = saved;
            raw.c_lflag &= !(libc::ICANON | libc::ECHO | libc::ISIG);
            raw.c_cc[libc::VMIN] = 1;
            raw.c_cc[libc::VTIME] = 0;
            // SAFETY: sets standard input's settings from a live termios.
            unsafe { libc::tcsetattr(0, libc::TCSANOW, &raw) };
        }
        print!("\x1b[?1049h\x1b[?25l");
        let _ = io::stdout().flush();
        Terminal { saved }
    }

    /// The terminal's size: (rows, columns).
    fn size() -> (usize, usize) {
        // SAFETY: an all-zero winsize is valid for the ioctl to fill.
        let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
        // SAFETY: TIOCGWINSZ fills one live winsize.
        let ok = unsafe { libc::ioctl(1, libc::TIOCGWINSZ, &mut ws) } == 0 && ws.ws_row > 0 && ws.ws_col > 0;
        if ok {
            (ws.ws_row as usize, ws.ws_col as usize)
        } else {
            (24, 80)
        }
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        print!("\x1b[?25h\x1b[?1049l");
        let _ = io::stdout().flush();
        if let Some(saved) = &self.saved {
            // SAFETY: restores the settings saved from this terminal.
            unsafe { libc::tcsetattr(0, libc::TCSANOW, saved) };
        }
    }
}

/// `wbcache top`; returns the exit status.
pub fn run(args: Refresh) -> i32 {
    // SAFETY: isatty reads no memory.
    if unsafe { libc::isatty(1) } != 1 {
        eprintln!("wbcache top: standard output is not a terminal (wbcache stat prints one snapshot)");
        return 2;
    }
    let handler = on_stop_signal as extern "C" fn(libc::c_int);
    for sig in [libc::SIGTERM, libc::SIGHUP, libc::SIGINT] {
        // SAFETY: the handler only stores to an atomic (async-signal-safe).
        unsafe { libc::signal(sig, handler as libc::sighandler_t) };
    }
    let terminal = Terminal::take();
    let mut keyboard = terminal.saved.is_some();
    while !STOP.load(Ordering::SeqCst) {
        draw(&args);
        match wait_for_key(args.interval_s, keyboard) {
            Key::Quit => break,
            Key::NoMoreKeys => keyboard = false,
            Key::None => {}
        }
    }
    drop(terminal);
    0
}

/// One screen: a heading line, then the table cut to the terminal.
fn draw(args: &Refresh) {
    let caches = caches(args.pid);
    let (rows, columns) = Terminal::size();
    let body = render::table(&caches).unwrap_or_else(|| none_found(args.pid) + "\n");
    let heading = format!(
        "wbcache top — {} cache{}, every {}s — q to quit",
        caches.len(),
        if caches.len() == 1 { "" } else { "s" },
        args.interval_s
    );
    let mut screen = String::from("\x1b[H\x1b[2J");
    for line in std::iter::once(heading.as_str()).chain(std::iter::once("")).chain(body.lines()).take(rows - 1) {
        screen.extend(line.chars().take(columns));
        screen.push_str("\r\n");
    }
    print!("{screen}");
    let _ = io::stdout().flush();
}

enum Key {
    Quit,
    /// Standard input ended (or is no terminal): only signals stop `top`.
    NoMoreKeys,
    None,
}

/// Waits `seconds` for a key; `q`, `Q`, Ctrl-C and Ctrl-D quit.
fn wait_for_key(seconds: f64, keyboard: bool) -> Key {
    let mut poll = libc::pollfd { fd: 0, events: libc::POLLIN, revents: 0 };
    let (fds, timeout_ms) = (if keyboard { 1 } else { 0 }, (seconds * 1000.0) as libc::c_int);
    // SAFETY: polls one live pollfd (or none), for at most the timeout.
    let ready = unsafe { libc::poll(&mut poll, fds, timeout_ms) };
    if ready <= 0 || !keyboard {
        return Key::None;
    }
    let mut keys = [0u8; 64];
    // SAFETY: reads at most `keys.len()` bytes into `keys`.
    let n = unsafe { libc::read(0, keys.as_mut_ptr().cast(), keys.len()) };
    match n {
        0 => Key::NoMoreKeys,
        n if n < 0 => Key::None,
        n if keys[..n as usize].iter().any(|k| matches!(k, b'q' | b'Q' | 3 | 4)) => Key::Quit,
        _ => Key::None,
    }
}
