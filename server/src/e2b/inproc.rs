//! Calling the gRPC handlers in-process: the request carries the caller's [`Principal`] in its
//! extensions exactly as the gRPC gate leaves it, and a client stream is a real
//! [`tonic::Streaming`] decoding gRPC-framed messages, so the handlers cannot tell the two
//! front-ends apart.

use std::convert::Infallible;

use bytes::{BufMut, Bytes, BytesMut};
use futures_util::{Stream, StreamExt};
use http_body::Frame;
use tonic::{Request, Streaming};

use crate::auth::Principal;

/// `message` as a request from `principal`.
pub fn request<T>(principal: &Principal, message: T) -> Request<T> {
    let mut request = Request::new(message);
    request.extensions_mut().insert(principal.clone());
    request
}

/// A client stream of `messages` as a request from `principal`.
pub fn streaming<T>(
    principal: &Principal,
    messages: impl Stream<Item = T> + Send + 'static,
) -> Request<Streaming<T>>
where
    T: prost::Message + Default + Send + 'static,
{
    let frames = messages.map(|m| {
        let mut out = BytesMut::with_capacity(5 + m.encoded_len());
        out.put_u8(0);
        out.put_u32(m.encoded_len() as u32);
        m.encode(&mut out).expect("a BytesMut grows");
        Ok::<_, Infallible>(Frame::data(Bytes::from(out)))
    });
    let body = http_body_util::StreamBody::new(frames);
    let decoder = tonic_prost::ProstDecoder::<T>::default();
    request(principal, Streaming::new_request(decoder, body, None, None))
}
