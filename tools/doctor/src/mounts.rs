//! `/proc/self/mounts`, parsed: the cgroup checks and the leftovers check
//! both read it.

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub point: String,
    pub fstype: String,
    pub options: String,
}

impl Mount {
    /// Whether the comma-separated mount options include `word`.
    pub fn has_option(&self, word: &str) -> bool {
        self.options.split(',').any(|option| option == word)
    }
}

pub fn parse(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split(' ');
            let _device = fields.next()?;
            Some(Mount {
                point: unescape(fields.next()?),
                fstype: fields.next()?.to_owned(),
                options: fields.next()?.to_owned(),
            })
        })
        .collect()
}

/// The kernel writes space, tab, newline and backslash in paths as `\ooo`.
fn unescape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('\\') {
        out.push_str(&rest[..at]);
        let code = rest
            .get(at + 1..at + 4)
            .and_then(|digits| u8::from_str_radix(digits, 8).ok());
        match code {
            Some(byte) => {
                out.push(char::from(byte));
                rest = &rest[at + 4..];
            }
            None => {
                out.push('\\');
                rest = &rest[at + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_give_point_type_and_options() {
        let mounts = parse(include_str!("../fixtures/mounts-hybrid"));
        let memory = mounts
            .iter()
            .find(|m| m.point == "/sys/fs/cgroup/memory")
            .expect("memory");
        assert_eq!(memory.fstype, "cgroup");
        assert!(memory.has_option("memory"));
        assert!(!memory.has_option("mem"));
        let escaped = parse("tmpfs /run/a\\040b tmpfs rw 0 0");
        assert_eq!(escaped[0].point, "/run/a b");
    }
}
