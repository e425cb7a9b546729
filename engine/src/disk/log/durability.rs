//! [`Durability`]: when a commit is on disk relative to the call that made it.

/// When a write is durable relative to the call that made it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// Every commit issues its own `fdatasync` before returning; commits are serialized.
    Immediate,
    /// Group commit (the default): a commit returns once an `fdatasync` that started after
    /// its write has finished. Writers that arrive while one is in flight share the next one,
    /// so there is exactly one `fdatasync` of the log per group.
    #[default]
    Group,
    /// No `fdatasync` on the write path: a crash may lose recent commits (never tear one).
    /// For tests and bulk import; [`Store::sync`](crate::Store::sync) makes everything durable.
    None,
}

impl std::str::FromStr for Durability {
    type Err = crate::base::error::Error;

    /// `immediate`, `group` or `none`.
    ///
    /// ```
    /// use undertext::Durability;
    /// assert_eq!("group".parse::<Durability>().unwrap(), Durability::Group);
    /// assert!("sometimes".parse::<Durability>().is_err());
    /// ```
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "immediate" => Durability::Immediate,
            "group" => Durability::Group,
            "none" => Durability::None,
            other => {
                return Err(crate::base::error::Error::InvalidArgument(format!(
                    "durability: expected immediate, group or none, found {other:?}"
                )));
            }
        })
    }
}
