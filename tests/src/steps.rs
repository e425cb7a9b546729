//! Steps of a tool loop for the worker's tests: one call that reads a file, and its result of
//! about 1,500 characters.

use undertext::{NewMessage, Part, Role};

/// Step `i`: an assistant message calling `read` on `f{i}.rs`, then the tool's result.
///
/// ```
/// let s = undertext_tests::steps::read_step(3);
/// assert_eq!(s.len(), 2);
/// ```
pub fn read_step(i: usize) -> Vec<NewMessage> {
    let id = format!("c{i}");
    vec![
        NewMessage {
            role: Role::Assistant,
            parts: vec![Part::ToolCall {
                id: id.clone(),
                name: "read".into(),
                args: format!("{{\"file\": \"f{i}.rs\"}}"),
            }],
            feedback: false,
        },
        NewMessage::tool_result(
            id,
            format!("file {i}: ") + &"fn item() { let value = compute(); } ".repeat(40),
        ),
    ]
}
