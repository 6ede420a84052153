//! sandboxd library
