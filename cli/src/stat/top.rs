//! `wbcache top`: the `stat` table redrawn every interval on the
//! terminal's alternate screen, until `q`, Ctrl-C, Ctrl-D, SIGTERM or
//! SIGHUP.
//!
//! Invariant: the terminal is left as it was found. The keyboard is read
//! a key at a time without echo while `top` runs (Ctrl-C arrives as a
//! key, not a signal), and [`Terminal`]'s drop restores the saved
//! settings, shows the cursor and leaves the alternate screen, on every
//! way out: a signal that ends `top` (SIGTERM, SIGHUP, SIGINT, SIGQUIT)
//! only sets a flag its loop checks at least every 100 ms, a stop signal
//! (SIGTSTP) is ignored while the keyboard is raw, and a panic restores
//! the terminal before its message is printed.

use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

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

/// Standard input's settings before `top`, for the panic hook.
static SAVED: OnceLock<libc::termios> = OnceLock::new();

/// What gives the terminal back: the cursor, the main screen, the saved
/// settings. Writes nothing that can panic.
fn restore_terminal() {
    let _ = io::stdout().write_all(b"\x1b[?25h\x1b[?1049l");
    let _ = io::stdout().flush();
    if let Some(saved) = SAVED.get() {
        // SAFETY: restores the settings saved from this terminal.
        unsafe { libc::tcsetattr(0, libc::TCSANOW, saved) };
    }
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
            let _ = SAVED.set(saved);
            let mut raw = saved;
            raw.c_lflag &= !(libc::ICANON | libc::ECHO | libc::ISIG);
            raw.c_cc[libc::VMIN] = 1;
            raw.c_cc[libc::VTIME] = 0;
            // SAFETY: sets standard input's settings from a live termios.
            unsafe { libc::tcsetattr(0, libc::TCSANOW, &raw) };
        }
        let previous_hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore_terminal();
            previous_hook(info);
        }));
        let _ = io::stdout().write_all(b"\x1b[?1049h\x1b[?25l");
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
        restore_terminal();
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
    for sig in [libc::SIGTERM, libc::SIGHUP, libc::SIGINT, libc::SIGQUIT] {
        // SAFETY: the handler only stores to an atomic (async-signal-safe).
        unsafe { libc::signal(sig, handler as libc::sighandler_t) };
    }
    // SAFETY: ignoring a signal touches no memory.
    unsafe { libc::signal(libc::SIGTSTP, libc::SIG_IGN) };
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
    // A terminal gone (SIGHUP follows) is no reason to panic.
    let _ = io::stdout().write_all(screen.as_bytes());
    let _ = io::stdout().flush();
}

enum Key {
    Quit,
    /// Standard input ended (or is no terminal): only signals stop `top`.
    NoMoreKeys,
    None,
}

/// Waits `seconds` for a key, looking at the stop flag at least every
/// 100 ms; `q`, `Q`, Ctrl-C and Ctrl-D quit.
fn wait_for_key(seconds: f64, keyboard: bool) -> Key {
    let until = Instant::now() + Duration::from_secs_f64(seconds);
    loop {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() || STOP.load(Ordering::SeqCst) {
            return Key::None;
        }
        let mut poll = libc::pollfd { fd: 0, events: libc::POLLIN, revents: 0 };
        let slice_ms = left.min(Duration::from_millis(100)).as_millis().max(1) as libc::c_int;
        // SAFETY: polls one live pollfd (or none), for at most the slice.
        let ready = unsafe { libc::poll(&mut poll, u64::from(keyboard) as libc::nfds_t, slice_ms) };
        if ready > 0 && keyboard {
            return read_keys();
        }
    }
}

/// The keys waiting on standard input.
fn read_keys() -> Key {
    let mut keys = [0u8; 64];
    // SAFETY: reads at most `keys.len()` bytes into `keys`.
    let n = unsafe { libc::read(0, keys.as_mut_ptr().cast(), keys.len()) };
    if n < 0 {
        let again = matches!(io::Error::last_os_error().raw_os_error(), Some(libc::EINTR | libc::EAGAIN));
        // Anything else (EIO: the terminal is gone) would make every poll
        // ready at once: stop reading it.
        return if again { Key::None } else { Key::NoMoreKeys };
    }
    match n {
        0 => Key::NoMoreKeys,
        n if keys[..n as usize].iter().any(|k| matches!(k, b'q' | b'Q' | 3 | 4)) => Key::Quit,
        _ => Key::None,
    }
}
