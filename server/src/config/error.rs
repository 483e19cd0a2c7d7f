//! [`ConfigError`]: where a config is wrong, and what to change.

use std::fmt;
use std::path::{Path, PathBuf};

/// A config that cannot be read: where, and what to change.
#[derive(Debug)]
pub struct ConfigError {
    pub(super) file: PathBuf,
    pub(super) line: Option<usize>,
    pub(super) column: Option<usize>,
    pub(super) path: String,
    pub(super) message: String,
}

impl ConfigError {
    /// The file read.
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// The line (from 1) of the mistake, when known.
    pub fn line(&self) -> Option<usize> {
        self.line
    }

    /// Where in the document, such as `descriptors[0].descriptors[1]`.
    pub fn path(&self) -> &str {
        &self.path
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let (Some(line), Some(column)) = (self.line, self.column) {
            write!(f, ":{line}:{column}")?;
        }
        if !self.path.is_empty() && self.path != "." {
            write!(f, ": {}", self.path)?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for ConfigError {}
