//! A session's retained output: the last `capacity` bytes, each chunk tagged with its stream,
//! addressed by byte offsets counted from the session's start.

use std::collections::VecDeque;

pub struct Ring {
    chunks: VecDeque<(bool, Vec<u8>)>,
    /// Offset of the first retained byte.
    start: u64,
    len: u64,
    capacity: u64,
}

impl Ring {
    pub fn new(capacity: u64) -> Self {
        Self { chunks: VecDeque::new(), start: 0, len: 0, capacity: capacity.max(1) }
    }

    pub fn oldest(&self) -> u64 {
        self.start
    }

    pub fn end(&self) -> u64 {
        self.start + self.len
    }

    pub fn push(&mut self, stderr: bool, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let keep = &data[data.len().saturating_sub(self.capacity as usize)..];
        self.start += (data.len() - keep.len()) as u64;
        self.chunks.push_back((stderr, keep.to_vec()));
        self.len += keep.len() as u64;
        while self.len > self.capacity {
            let over = (self.len - self.capacity) as usize;
            let front = &mut self.chunks.front_mut().expect("len > 0 means a chunk").1;
            if front.len() <= over {
                let n = front.len();
                self.chunks.pop_front();
                self.len -= n as u64;
                self.start += n as u64;
            } else {
                front.drain(..over);
                self.len -= over as u64;
                self.start += over as u64;
            }
        }
    }

    /// Up to `max` bytes of one stream from `offset` (moved up to the oldest retained byte):
    /// `(offset, stderr, bytes)`, or `None` when nothing is there yet.
    pub fn read(&self, offset: u64, max: usize) -> Option<(u64, bool, Vec<u8>)> {
        let mut at = self.start;
        let offset = offset.max(self.start);
        let mut found: Option<(bool, Vec<u8>)> = None;
        for (stderr, chunk) in &self.chunks {
            let end = at + chunk.len() as u64;
            match &mut found {
                // Later chunks of the same stream join the first (fewer, larger frames: a pty
                // hands over a few KiB per read).
                Some((s, out)) => {
                    if *s != *stderr || out.len() >= max {
                        break;
                    }
                    let n = chunk.len().min(max - out.len());
                    out.extend_from_slice(&chunk[..n]);
                }
                None if offset < end => {
                    let from = (offset - at) as usize;
                    let n = (chunk.len() - from).min(max);
                    found = Some((*stderr, chunk[from..from + n].to_vec()));
                }
                None => {}
            }
            at = end;
        }
        found.map(|(stderr, data)| (offset, stderr, data))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_last_capacity_bytes_with_their_offsets() {
        let mut r = Ring::new(8);
        r.push(false, b"hello ");
        r.push(true, b"world");
        assert_eq!((r.oldest(), r.end()), (3, 11));
        assert_eq!(r.read(0, 100), Some((3, false, b"lo ".to_vec())));
        assert_eq!(r.read(6, 2), Some((6, true, b"wo".to_vec())));
        assert_eq!(r.read(11, 100), None);
        r.push(false, b"0123456789abc");
        assert_eq!((r.oldest(), r.end()), (16, 24));
        assert_eq!(r.read(0, 100), Some((16, false, b"56789abc".to_vec())));
        // Same-stream chunks come as one read, up to `max`.
        let mut r = Ring::new(100);
        r.push(false, b"ab");
        r.push(false, b"cd");
        r.push(true, b"ef");
        assert_eq!(r.read(1, 100), Some((1, false, b"bcd".to_vec())));
        assert_eq!(r.read(0, 3), Some((0, false, b"abc".to_vec())));
        assert_eq!(r.read(4, 100), Some((4, true, b"ef".to_vec())));
    }
}
