//! How the front-ends make their calls: a `sandbox.v1` message as a request of the [`Caller`]
//! (its credential and trace context in the metadata), sent through the served stack by
//! `service::calls::Calls`, so the handlers, the gate and every layer see a gRPC call.

use futures_util::Stream;
use tonic::Request;

pub use crate::service::calls::Caller;

/// `message` as a request from `caller`.
pub fn request<T>(caller: &Caller, message: T) -> Request<T> {
    caller.request(message)
}

/// A client stream of `messages` as a request from `caller`.
pub fn streaming<T, S>(caller: &Caller, messages: S) -> Request<S>
where
    S: Stream<Item = T> + Send + 'static,
{
    caller.request(messages)
}
