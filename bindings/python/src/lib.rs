//! Python bindings of Undertext (PyO3): land with the Python issue; empty until then.
