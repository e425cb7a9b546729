//! Shared helpers for the integration tests of Undertext.
