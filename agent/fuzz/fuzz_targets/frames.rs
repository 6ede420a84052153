//! Arbitrary bytes as a stream of agent frames: splitting and decoding must never panic nor
//! allocate past the frame bound, and whatever decodes must re-encode to something that
//! decodes to the same message.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sandboxd_agent::protocol::{self, decode_event, decode_request, split_frame};

fuzz_target!(|data: &[u8]| {
    let mut rest = data;
    while let Ok(Some((body, used))) = split_frame(rest, protocol::MAX_FRAME) {
        if let Ok(frame) = decode_request(body) {
            let again = frame.message.encode(frame.id);
            let back = decode_request(&again[4..]).expect("a re-encoded request decodes");
            assert_eq!(back, frame);
        }
        if let Ok(frame) = decode_event(body) {
            let again = frame.message.encode(frame.id);
            let back = decode_event(&again[4..]).expect("a re-encoded event decodes");
            assert_eq!(back, frame);
        }
        rest = &rest[used..];
    }
});
