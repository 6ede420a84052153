//! Just enough tar to stream one file through `docker cp -` in either direction without
//! holding it in memory: the header (with a GNU long-name entry for long paths) before the
//! bytes, and a reader that finds the one file in the archive docker sends back.

use tokio::io::{AsyncRead, AsyncReadExt};

const BLOCK: usize = 512;

/// The blocks that go before a file's bytes: `path` relative to `/`, root-owned, `mode`.
pub fn file_prefix(path: &str, size: u64, mode: u32) -> Result<Vec<u8>, String> {
    let rel = path.trim_start_matches('/');
    if rel.is_empty() {
        return Err("path must name a file, not /".into());
    }
    let mut out = Vec::with_capacity(3 * BLOCK);
    let mut header = tar::Header::new_gnu();
    if rel.len() > 99 {
        // GNU long name: a pseudo-entry whose data is the real name.
        let mut long = tar::Header::new_gnu();
        long.set_entry_type(tar::EntryType::GNULongName);
        long.as_gnu_mut().ok_or("gnu header")?.name[..13].copy_from_slice(b"././@LongLink");
        long.set_size(rel.len() as u64 + 1);
        long.set_mode(0o644);
        long.set_cksum();
        out.extend_from_slice(long.as_bytes());
        out.extend_from_slice(rel.as_bytes());
        out.push(0);
        out.resize(out.len().div_ceil(BLOCK) * BLOCK, 0);
        let short = &rel.as_bytes()[..99];
        header.as_gnu_mut().ok_or("gnu header")?.name[..99].copy_from_slice(short);
    } else {
        header.set_path(rel).map_err(|e| format!("invalid path {path:?}: {e}"))?;
    }
    header.set_entry_type(tar::EntryType::Regular);
    header.set_size(size);
    header.set_mode(mode & 0o7777);
    header.set_uid(0);
    header.set_gid(0);
    header.set_mtime(
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()),
    );
    header.set_cksum();
    out.extend_from_slice(header.as_bytes());
    Ok(out)
}

/// Zero padding after `size` bytes of data, then the end-of-archive marker.
pub fn file_suffix(size: u64) -> Vec<u8> {
    let pad = (BLOCK - (size % BLOCK as u64) as usize) % BLOCK;
    vec![0u8; pad + 2 * BLOCK]
}

/// What the first real entry of a `docker cp NAME:PATH -` archive is.
#[derive(Debug, PartialEq, Eq)]
pub enum FirstEntry {
    File { size: u64, mode: u32 },
    Directory,
    Other(String),
    Empty,
}

/// Read headers up to the first real entry (skipping PAX and GNU long-name records).
pub async fn read_first_entry<R: AsyncRead + Unpin>(reader: &mut R) -> std::io::Result<FirstEntry> {
    let mut block = [0u8; BLOCK];
    loop {
        if !read_block(reader, &mut block).await? || block.iter().all(|b| *b == 0) {
            return Ok(FirstEntry::Empty);
        }
        let header = tar::Header::from_byte_slice(&block);
        let size = header.entry_size().map_err(std::io::Error::other)?;
        let kind = header.entry_type();
        match kind {
            tar::EntryType::XHeader
            | tar::EntryType::XGlobalHeader
            | tar::EntryType::GNULongName
            | tar::EntryType::GNULongLink => {
                skip(reader, size.div_ceil(BLOCK as u64) * BLOCK as u64).await?;
            }
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                let mode = header.mode().unwrap_or(0o644);
                return Ok(FirstEntry::File { size, mode });
            }
            tar::EntryType::Directory => return Ok(FirstEntry::Directory),
            other => return Ok(FirstEntry::Other(format!("{other:?}"))),
        }
    }
}

async fn read_block<R: AsyncRead + Unpin>(reader: &mut R, block: &mut [u8; BLOCK]) -> std::io::Result<bool> {
    let mut filled = 0;
    while filled < BLOCK {
        let n = reader.read(&mut block[filled..]).await?;
        if n == 0 {
            return if filled == 0 { Ok(false) } else { Err(std::io::ErrorKind::UnexpectedEof.into()) };
        }
        filled += n;
    }
    Ok(true)
}

async fn skip<R: AsyncRead + Unpin>(reader: &mut R, mut n: u64) -> std::io::Result<()> {
    let mut buf = [0u8; BLOCK];
    while n > 0 {
        let want = n.min(BLOCK as u64) as usize;
        reader.read_exact(&mut buf[..want]).await?;
        n -= want as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn archive(path: &str, data: &[u8]) -> Vec<u8> {
        let mut bytes = file_prefix(path, data.len() as u64, 0o640).unwrap();
        bytes.extend_from_slice(data);
        bytes.extend(file_suffix(data.len() as u64));
        bytes
    }

    #[test]
    fn prefix_is_a_valid_archive_for_short_and_long_paths() {
        let long = format!("/deep/{}/file.txt", "d".repeat(150));
        for path in ["/tmp/a/b.txt", long.as_str()] {
            let bytes = archive(path, b"hello world");
            assert_eq!(bytes.len() % 512, 0);
            let mut ar = tar::Archive::new(bytes.as_slice());
            let mut entries = ar.entries().unwrap();
            let mut e = entries.next().unwrap().unwrap();
            assert_eq!(e.path().unwrap().to_string_lossy(), path.trim_start_matches('/'));
            assert_eq!(e.header().mode().unwrap(), 0o640);
            assert_eq!(e.header().uid().unwrap(), 0);
            let mut s = String::new();
            std::io::Read::read_to_string(&mut e, &mut s).unwrap();
            assert_eq!(s, "hello world");
            assert!(entries.next().is_none());
        }
        assert!(file_prefix("/", 1, 0o644).is_err());
    }

    #[tokio::test]
    async fn first_entry_skips_long_names() {
        let long = format!("/x/{}", "n".repeat(200));
        let bytes = archive(&long, &[7u8; 1000]);
        let mut r = bytes.as_slice();
        assert_eq!(read_first_entry(&mut r).await.unwrap(), FirstEntry::File { size: 1000, mode: 0o640 });
        let mut rest = vec![0u8; 1000];
        r.read_exact(&mut rest).await.unwrap();
        assert!(rest.iter().all(|b| *b == 7));
        let mut empty: &[u8] = &[];
        assert_eq!(read_first_entry(&mut empty).await.unwrap(), FirstEntry::Empty);
    }
}
