//! [`DurationText`]: a positive duration as written in a config, shared
//! by the Redis keys and the in-flight keys.

use std::fmt;
use std::time::Duration;

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

/// A positive duration written as `"5ms"`, `"250ms"`, `"1s"` or `"1m 30s"`.
pub(super) struct DurationText(pub(super) Duration);

impl<'de> Deserialize<'de> for DurationText {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<DurationText, D::Error> {
        struct DurationVisitor;
        impl Visitor<'_> for DurationVisitor {
            type Value = DurationText;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration such as \"5ms\", \"250ms\" or \"1s\"")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<DurationText, E> {
                let duration = humantime::parse_duration(s).map_err(|e| {
                    E::custom(format_args!(
                        "{s:?} is not a duration ({e}): write a number and a unit, such as \
                         \"5ms\", \"250ms\" or \"1s\""
                    ))
                })?;
                if duration.is_zero() {
                    return Err(E::custom(format_args!(
                        "{s:?} is zero: use a positive duration, such as \"5ms\""
                    )));
                }
                Ok(DurationText(duration))
            }
        }
        deserializer.deserialize_str(DurationVisitor)
    }
}
