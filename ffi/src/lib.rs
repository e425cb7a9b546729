//! The C ABI of Undertext (`undertext_*`): lands with the C ABI issue; empty until then.
