//! gzip on envd's `/files` (envd 0.5.7's `Content-Encoding: gzip` uploads and
//! `Accept-Encoding: gzip` downloads), streamed: each chunk goes through flate2's encoder or
//! decoder as it arrives, so a transfer is never held whole.

use std::io::Write;
use std::pin::Pin;

use bytes::Bytes;
use flate2::write::{GzDecoder, GzEncoder};
use futures_util::{Stream, StreamExt};

type Chunks = Pin<Box<dyn Stream<Item = Result<Bytes, std::io::Error>> + Send>>;

/// The encodings a `Content-Encoding` may name here.
pub const ACCEPTED: &str = "gzip, identity";

/// Whether `content_encoding` asks for gzip (`None` when it names none or identity); an
/// unknown encoding is an error naming what is accepted.
pub fn is_gzip(content_encoding: Option<&str>) -> Result<bool, String> {
    match content_encoding.map(str::trim).map(str::to_ascii_lowercase).as_deref() {
        None | Some("") | Some("identity") => Ok(false),
        Some("gzip") | Some("x-gzip") => Ok(true),
        Some(other) => Err(format!("Content-Encoding {other:?}: accepted are {ACCEPTED}")),
    }
}

/// Whether an `Accept-Encoding` admits gzip (`q=0` refuses it).
pub fn accepts_gzip(accept_encoding: Option<&str>) -> bool {
    accept_encoding.unwrap_or("").split(',').any(|part| {
        let mut fields = part.split(';').map(str::trim);
        let name = fields.next().unwrap_or("");
        let refused = fields.any(|f| f.replace(' ', "") == "q=0" || f.replace(' ', "") == "q=0.0");
        (name.eq_ignore_ascii_case("gzip") || name.eq_ignore_ascii_case("x-gzip")) && !refused
    })
}

/// `chunks` of a gzip stream, decompressed as they come.
pub fn decompress(chunks: Chunks) -> Chunks {
    let state = (chunks, Some(GzDecoder::new(Vec::new())));
    Box::pin(futures_util::stream::unfold(state, |(mut chunks, mut decoder)| async move {
        loop {
            let current = decoder.as_mut()?;
            match chunks.next().await {
                Some(Ok(data)) => {
                    if let Err(e) = current.write_all(&data) {
                        return Some((Err(invalid(e)), (chunks, None)));
                    }
                    let out = std::mem::take(current.get_mut());
                    if !out.is_empty() {
                        return Some((Ok(Bytes::from(out)), (chunks, decoder)));
                    }
                }
                Some(Err(e)) => return Some((Err(e), (chunks, None))),
                None => {
                    let mut last = decoder.take()?;
                    return match last.try_finish() {
                        Ok(()) => {
                            let out = std::mem::take(last.get_mut());
                            if out.is_empty() {
                                None
                            } else {
                                Some((Ok(Bytes::from(out)), (chunks, None)))
                            }
                        }
                        Err(e) => Some((Err(invalid(e)), (chunks, None))),
                    };
                }
            }
        }
    }))
}

/// `chunks` compressed into one gzip stream as they come.
pub fn compress(chunks: Chunks) -> Chunks {
    let state = (chunks, Some(GzEncoder::new(Vec::new(), flate2::Compression::fast())));
    Box::pin(futures_util::stream::unfold(state, |(mut chunks, mut encoder)| async move {
        loop {
            let current = encoder.as_mut()?;
            match chunks.next().await {
                Some(Ok(data)) => {
                    current.write_all(&data).ok()?;
                    let out = std::mem::take(current.get_mut());
                    if !out.is_empty() {
                        return Some((Ok(Bytes::from(out)), (chunks, encoder)));
                    }
                }
                Some(Err(e)) => return Some((Err(e), (chunks, None))),
                None => {
                    let out = encoder.take()?.finish();
                    return Some((out.map(Bytes::from), (chunks, None)));
                }
            }
        }
    }))
}

fn invalid(e: std::io::Error) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, format!("the gzip body is not valid: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunked(data: Vec<u8>, size: usize) -> Chunks {
        let parts: Vec<Result<Bytes, std::io::Error>> =
            data.chunks(size).map(|c| Ok(Bytes::copy_from_slice(c))).collect();
        Box::pin(futures_util::stream::iter(parts))
    }

    async fn collect(chunks: Chunks) -> Result<Vec<u8>, std::io::Error> {
        let mut out = Vec::new();
        let mut chunks = chunks;
        while let Some(c) = chunks.next().await {
            out.extend_from_slice(&c?);
        }
        Ok(out)
    }

    #[tokio::test]
    async fn a_stream_round_trips_through_gzip_in_small_chunks() {
        let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let packed = collect(compress(chunked(data.clone(), 4096))).await.unwrap();
        assert!(packed.len() < data.len());
        assert_eq!(&packed[..2], &[0x1f, 0x8b], "a gzip member");
        let unpacked = collect(decompress(chunked(packed, 7))).await.unwrap();
        assert_eq!(unpacked, data);
    }

    #[tokio::test]
    async fn a_body_that_is_not_gzip_fails_with_invalid_data() {
        let err = collect(decompress(chunked(b"plain text, not gzip".to_vec(), 5))).await.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
        let cut = collect(compress(chunked(b"abc".repeat(100), 10))).await.unwrap();
        let err = collect(decompress(chunked(cut[..cut.len() - 4].to_vec(), 10))).await.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidData);
    }

    #[test]
    fn encodings_are_read_as_http_defines_them() {
        assert_eq!(is_gzip(None), Ok(false));
        assert_eq!(is_gzip(Some("GZIP")), Ok(true));
        assert!(is_gzip(Some("br")).unwrap_err().contains("accepted are gzip"));
        assert!(accepts_gzip(Some("deflate, gzip;q=0.5")));
        assert!(!accepts_gzip(Some("gzip;q=0")));
        assert!(!accepts_gzip(None));
    }
}
