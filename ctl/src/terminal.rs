//! The local terminal in raw mode for the life of a guard: keys (Ctrl-C included) go to the
//! remote program byte for byte, and the saved settings come back when the guard drops —
//! on a normal return, an error, a panic, or a signal that ends `shell`.

use crate::error::CtlError;

pub struct RawMode(());

impl RawMode {
    pub fn enable() -> Result<Self, CtlError> {
        crossterm::terminal::enable_raw_mode()
            .map_err(|e| CtlError::local(format!("cannot put the terminal in raw mode: {e}")))?;
        Ok(Self(()))
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        let _ = crossterm::terminal::disable_raw_mode();
    }
}

/// The local terminal's size as (rows, cols); 24x80 when it cannot be read.
pub fn size() -> (u16, u16) {
    match crossterm::terminal::size() {
        Ok((cols, rows)) if cols > 0 && rows > 0 => (rows, cols),
        _ => (sandboxd_client::PtySpec::DEFAULT_ROWS, sandboxd_client::PtySpec::DEFAULT_COLS),
    }
}
