//! The marker protocol of `pty().exec` in a live shell session, shared by every client that
//! runs commands through a terminal.
//!
//! A command is typed as `{ CMD\n} </dev/null; printf '%s%s:%s\n' 'HEAD' 'TAIL' "$?"\n`: the
//! shell prints `HEADTAIL:<code>` when it finishes, and since the typed line only holds `'HEAD'
//! 'TAIL'`, the terminal's echo never contains the marker literally. Everything between the echo
//! of the typed lines and the marker is the command's output.

/// Bracketed-paste switches bash's readline prints around each prompt.
const BRACKETED_PASTE: [&[u8]; 3] = [b"\x1b[?2004l\r", b"\x1b[?2004l", b"\x1b[?2004h"];

/// One command's marker: two random halves that only meet in the shell's output.
#[derive(Clone, Debug)]
pub struct Marker {
    head: String,
    tail: String,
}

/// Where the marker line was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MarkerHit {
    /// Offset of the marker (the end of the command's output).
    pub start: usize,
    /// The command's exit status.
    pub code: i32,
}

impl Default for Marker {
    fn default() -> Self {
        Self::new()
    }
}

impl Marker {
    /// A fresh, unique marker.
    pub fn new() -> Self {
        let token = uuid::Uuid::new_v4().simple().to_string();
        let (a, b) = token.split_at(token.len() / 2);
        Marker { head: format!("__SBXD_{a}"), tail: format!("{b}_DONE__") }
    }

    /// A marker with the given halves (tests).
    pub fn fixed(head: &str, tail: &str) -> Self {
        Marker { head: head.to_string(), tail: tail.to_string() }
    }

    /// The marker text as the shell prints it.
    pub fn text(&self) -> String {
        format!("{}{}", self.head, self.tail)
    }

    fn printf(&self) -> String {
        format!("printf '%s%s:%s\\n' '{}' '{}' \"$?\"", self.head, self.tail)
    }

    /// What to type to run `command` and mark its end.
    pub fn command_line(&self, command: &str) -> String {
        let command = if command.trim().is_empty() { ":" } else { command };
        format!("{{ {command}\n}} </dev/null; {}\n", self.printf())
    }

    /// What to type once into a fresh default shell: no echo, no prompts, no bracketed paste,
    /// so later outputs come back clean. Every step tolerates a shell or image without it.
    pub fn setup_line(&self) -> String {
        format!(
            "stty -echo 2>/dev/null; PS1=''; PS2=''; unset PROMPT_COMMAND 2>/dev/null; \
             bind 'set enable-bracketed-paste off' 2>/dev/null; {}\n",
            self.printf()
        )
    }

    /// The first complete marker line in `buf` (`HEADTAIL:<digits>` then a line end), if any.
    pub fn find(&self, buf: &[u8]) -> Option<MarkerHit> {
        let needle = format!("{}:", self.text());
        let needle = needle.as_bytes();
        let mut from = 0;
        while let Some(pos) = find_bytes(&buf[from..], needle) {
            let start = from + pos;
            let digits_at = start + needle.len();
            let rest = &buf[digits_at..];
            let ndigits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
            let after = &rest[ndigits..];
            if ndigits > 0 && (after.starts_with(b"\n") || after.starts_with(b"\r")) {
                let code = std::str::from_utf8(&rest[..ndigits]).ok().and_then(|s| s.parse::<i32>().ok());
                if let Some(code) = code {
                    // A `\r` alone may be followed by the `\n` still in flight; the code is
                    // complete either way.
                    return Some(MarkerHit { start, code });
                }
            }
            if after.is_empty() {
                // The line is not complete yet.
                return None;
            }
            from = start + 1;
        }
        None
    }

    /// The command's output in `buf[..end]`: the echo of the typed lines cut off (everything up
    /// to the line holding the echoed `'TAIL'`, which a line editor may have wrapped), bracketed-
    /// paste switches dropped, `\r\n` turned into `\n`.
    pub fn extract(&self, buf: &[u8], end: usize) -> Vec<u8> {
        let before = &buf[..end.min(buf.len())];
        let body = match rfind_echoed(before, self.tail.as_bytes()) {
            Some(after_tail) => match before[after_tail..].iter().position(|&b| b == b'\n') {
                Some(nl) => &before[after_tail + nl + 1..],
                None => &before[before.len()..],
            },
            None => before,
        };
        normalize_terminal_output(body)
    }
}

/// Drops bracketed-paste switches and turns `\r\n` into `\n`.
pub fn normalize_terminal_output(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len());
    let mut i = 0;
    'outer: while i < data.len() {
        if data[i] == 0x1b {
            for seq in BRACKETED_PASTE {
                if data[i..].starts_with(seq) {
                    i += seq.len();
                    continue 'outer;
                }
            }
        }
        if data[i] == b'\r' && data.get(i + 1) == Some(&b'\n') {
            i += 1;
            continue;
        }
        out.push(data[i]);
        i += 1;
    }
    out
}

fn find_bytes(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || needle.len() > haystack.len() {
        return None;
    }
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The end offset (in `haystack`) of the last occurrence of `needle` as a terminal shows typed
/// text: line breaks and escape sequences a line editor inserts when it wraps the line may sit
/// between any two of its bytes.
fn rfind_echoed(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() {
        return None;
    }
    // The visible bytes and, for each, its offset in `haystack`.
    let mut visible = Vec::with_capacity(haystack.len());
    let mut offsets = Vec::with_capacity(haystack.len());
    let mut i = 0;
    while i < haystack.len() {
        match haystack[i] {
            b'\r' | b'\n' => i += 1,
            0x1b => i += escape_len(&haystack[i..]),
            b => {
                visible.push(b);
                offsets.push(i);
                i += 1;
            }
        }
    }
    if needle.len() > visible.len() {
        return None;
    }
    let pos = visible.windows(needle.len()).rposition(|w| w == needle)?;
    Some(offsets[pos + needle.len() - 1] + 1)
}

/// Length of the escape sequence at the start of `data` (which starts with ESC): a CSI
/// sequence up to its final byte, else ESC and one byte.
fn escape_len(data: &[u8]) -> usize {
    if data.get(1) == Some(&b'[') {
        match data[2..].iter().position(|b| (0x40..=0x7e).contains(b)) {
            Some(p) => p + 3,
            None => data.len(),
        }
    } else {
        data.len().min(2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m() -> Marker {
        Marker::fixed("__H_ab", "cd_T__")
    }

    #[test]
    fn typed_line_never_contains_the_marker() {
        let marker = Marker::new();
        let line = marker.command_line("echo hi");
        assert!(!line.contains(&marker.text()));
        assert!(line.starts_with("{ echo hi\n} </dev/null; printf '%s%s:%s\\n' '"));
        assert!(line.ends_with("\"$?\"\n"));
        assert!(!marker.setup_line().contains(&marker.text()));
        assert_eq!(
            m().command_line("  "),
            "{ :\n} </dev/null; printf '%s%s:%s\\n' '__H_ab' 'cd_T__' \"$?\"\n"
        );
    }

    #[test]
    fn markers_are_unique() {
        assert_ne!(Marker::new().text(), Marker::new().text());
    }

    #[test]
    fn finds_complete_marker_lines_only() {
        let marker = m();
        assert_eq!(marker.find(b"out\r\n__H_abcd_T__:"), None);
        assert_eq!(marker.find(b"out\r\n__H_abcd_T__:1"), None);
        assert_eq!(marker.find(b"out\r\n__H_abcd_T__:12\r\n"), Some(MarkerHit { start: 5, code: 12 }));
        assert_eq!(marker.find(b"__H_abcd_T__:0\n"), Some(MarkerHit { start: 0, code: 0 }));
        // Output without a trailing newline runs into the marker.
        assert_eq!(marker.find(b"abc__H_abcd_T__:3\r\n"), Some(MarkerHit { start: 3, code: 3 }));
        // A look-alike without digits is skipped.
        assert_eq!(marker.find(b"__H_abcd_T__:x\n__H_abcd_T__:7\n"), Some(MarkerHit { start: 15, code: 7 }));
    }

    #[test]
    fn extracts_output_after_echo() {
        let marker = m();
        let typed = marker.command_line("echo hi; echo there");
        // Echo on: the terminal shows the typed lines (with a PS2 prompt) before the output.
        let mut buf = typed.replace('\n', "\r\n").replace("} </dev", "> } </dev").into_bytes();
        buf.extend_from_slice(b"hi\r\nthere\r\n__H_abcd_T__:0\r\n$ ");
        let hit = marker.find(&buf).expect("marker");
        assert_eq!(hit.code, 0);
        assert_eq!(marker.extract(&buf, hit.start), b"hi\nthere\n");
    }

    #[test]
    fn extracts_output_without_echo() {
        let marker = m();
        let buf = b"\x1b[?2004l\rline1\r\nline2\r\n__H_abcd_T__:2\r\n\x1b[?2004h".to_vec();
        let hit = marker.find(&buf).expect("marker");
        assert_eq!(hit.code, 2);
        assert_eq!(marker.extract(&buf, hit.start), b"line1\nline2\n");
        let buf = b"no newline__H_abcd_T__:0\r\n".to_vec();
        let hit = marker.find(&buf).expect("marker");
        assert_eq!(marker.extract(&buf, hit.start), b"no newline");
    }

    #[test]
    fn extracts_output_after_a_wrapped_echo() {
        let marker = m();
        // busybox ash wraps the typed line at the terminal width, inside the tail.
        let mut buf = b"/ # \x1b[6n{ echo explicit\r\n> } </dev/null; printf '%s%s:%s\\n' '__H_ab' 'cd_\r\nT__' \"$?\"\r\n"
            .to_vec();
        buf.extend_from_slice(b"explicit\r\n__H_abcd_T__:0\r\n/ # ");
        let hit = marker.find(&buf).expect("marker");
        assert_eq!(marker.extract(&buf, hit.start), b"explicit\n");
        assert_eq!(rfind_echoed(b"ab\x1b[1Kc", b"abc"), Some(7));
        assert_eq!(rfind_echoed(b"xyz", b"abc"), None);
        assert_eq!(escape_len(b"\x1b[12"), 4);
        assert_eq!(escape_len(b"\x1b"), 1);
    }

    #[test]
    fn normalizes_crlf_and_keeps_lone_cr() {
        assert_eq!(normalize_terminal_output(b"a\r\nb\rc\r\n\x1b[?2004hd"), b"a\nb\rc\nd");
        assert_eq!(normalize_terminal_output(b""), b"");
        assert_eq!(normalize_terminal_output(b"\r"), b"\r");
    }
}
