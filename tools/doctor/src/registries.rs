//! The registries the builds fetch from, where this machine's settings say
//! they are, and whether each answered an HTTP request.

use crate::check::Check;
use crate::ran::Ran;

pub const DEFAULT_GO_PROXY: &str = "https://proxy.golang.org";
pub const CRATES_IO: &str = "https://index.crates.io/config.json";
pub const DEFAULT_PYPI: &str = "https://pypi.org/simple/pip/";
/// curl's `--max-time`.
pub const TIMEOUT_SECONDS: u64 = 10;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registry {
    pub name: &'static str,
    pub url: String,
    /// Which build needs it.
    pub feeds: &'static str,
}

/// A registry to ask, or a verdict reached without asking.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    Ask(Registry),
    Decided(Check),
}

/// The proxy to ask for Go's modules: the first entry of GOPROXY that is a
/// URL (https when it has no scheme); with none, the default proxy stands in
/// for `direct` (the modules' origins), and `off` alone fetches nothing.
pub fn go_proxy(goproxy: &str) -> Option<String> {
    let entries: Vec<&str> = goproxy
        .split([',', '|'])
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .collect();
    match entries
        .iter()
        .find(|entry| !matches!(**entry, "off" | "direct"))
    {
        Some(url) if url.contains("://") => Some((*url).to_owned()),
        Some(host) => Some(format!("https://{host}")),
        None if entries.first() == Some(&"off") => None,
        None => Some(DEFAULT_GO_PROXY.to_owned()),
    }
}

/// The first `deb http…` URI of a one-line-style sources.list.
pub fn debian_one_line(text: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let mut rest = line.trim().strip_prefix("deb")?;
        if !rest.starts_with([' ', '\t']) {
            return None; // deb-src
        }
        rest = rest.trim_start();
        if let Some(options) = rest.strip_prefix('[') {
            rest = options.split_once(']')?.1.trim_start();
        }
        let uri = rest.split_whitespace().next()?;
        uri.starts_with("http").then(|| uri.to_owned())
    })
}

/// The first http URI of an enabled `Types: deb` stanza of a deb822 `.sources` file.
pub fn debian_deb822(text: &str) -> Option<String> {
    let mut stanzas: Vec<Vec<&str>> = vec![Vec::new()];
    for line in text.lines().filter(|line| !line.starts_with('#')) {
        match stanzas.last_mut() {
            Some(stanza) if !line.trim().is_empty() => stanza.push(line),
            _ => stanzas.push(Vec::new()),
        }
    }
    stanzas.iter().find_map(|lines| {
        let field = |key: &str| {
            lines.iter().find_map(|line| {
                let (name, value) = line.split_once(':')?;
                name.trim().eq_ignore_ascii_case(key).then(|| value.trim())
            })
        };
        let debs = field("Types")?.split_whitespace().any(|kind| kind == "deb");
        let enabled = !field("Enabled").is_some_and(|value| value.eq_ignore_ascii_case("no"));
        let uri = field("URIs")?
            .split_whitespace()
            .find(|uri| uri.starts_with("http"))?;
        (debs && enabled).then(|| uri.to_owned())
    })
}

/// Ask registry `name` at `url`; with no URL, warn with `without`.
fn ask_or_warn(
    name: &'static str,
    url: Option<String>,
    feeds: &'static str,
    without: &str,
) -> Probe {
    match url {
        Some(url) => Probe::Ask(Registry { name, url, feeds }),
        None => Probe::Decided(Check::warn(name, without)),
    }
}

/// What to ask: `goproxy` from `go env GOPROXY`, `pip_index_url` from
/// `$PIP_INDEX_URL`, `debian` from the apt sources.
pub fn plan(goproxy: &str, pip_index_url: Option<&str>, debian: Option<String>) -> Vec<Probe> {
    let pypi = pip_index_url
        .filter(|url| !url.is_empty())
        .unwrap_or(DEFAULT_PYPI);
    vec![
        ask_or_warn(
            "go proxy",
            go_proxy(goproxy),
            "Go modules for the cluster tools",
            "GOPROXY=off: Go fetches no modules; the cluster tools build only from a filled module cache",
        ),
        Probe::Ask(Registry {
            name: "crates.io",
            url: CRATES_IO.to_owned(),
            feeds: "crates for cargo",
        }),
        Probe::Ask(Registry {
            name: "pypi",
            url: pypi.to_owned(),
            feeds: "the PostgreSQL 18 client (tools/postgresql.sh)",
        }),
        ask_or_warn(
            "debian",
            debian,
            "containerd, podman and mmdebstrap",
            "no `deb http…` source in /etc/apt/sources.list or /etc/apt/sources.list.d: \
             apt-get cannot install containerd, podman and mmdebstrap",
        ),
    ]
}

/// `curl -sS -o /dev/null -w '%{http_code} %{time_total}' --max-time 10 URL`
/// did `ran`: any HTTP status means the registry answers.
pub fn answer(registry: &Registry, ran: &Ran) -> Check {
    let Registry { name, url, feeds } = registry;
    if let Ran::Missing = ran {
        return Check::warn(name, format!("curl not found: {url} not checked"))
            .with_fix("apt-get install curl, or run with --offline");
    }
    let said = ran.stdout().map(|out| {
        let mut words = out.split_whitespace();
        (
            words.next().unwrap_or("000").to_owned(),
            words.next().unwrap_or("?").to_owned(),
        )
    });
    match said {
        Ok((status, seconds)) if status != "000" => {
            let seconds: f64 = seconds.parse().unwrap_or(0.0);
            Check::ok(
                name,
                format!("{url} answers (HTTP {status}, {seconds:.1} s): {feeds}"),
            )
        }
        Ok(_) => fail(registry, "no HTTP answer".to_owned()),
        Err(error) => fail(registry, error),
    }
}

fn fail(registry: &Registry, error: String) -> Check {
    Check::fail(
        registry.name,
        format!(
            "{} does not answer ({}): {}",
            registry.url,
            error.trim(),
            registry.feeds
        ),
        "the builds fetch Go modules, crates, PostgreSQL wheels and Debian packages from here: \
         check the network / proxy settings",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::CheckStatus;

    #[test]
    fn goproxy_gives_the_first_url() {
        let cases = [
            (
                "https://proxy.golang.org,direct",
                Some("https://proxy.golang.org"),
            ),
            (
                "https://goproxy.corp.example|https://proxy.golang.org",
                Some("https://goproxy.corp.example"),
            ),
            ("goproxy.io,direct", Some("https://goproxy.io")),
            ("direct", Some(DEFAULT_GO_PROXY)),
            (
                "direct,https://goproxy.corp.example",
                Some("https://goproxy.corp.example"),
            ),
            ("", Some(DEFAULT_GO_PROXY)),
            ("off", None),
        ];
        for (goproxy, url) in cases {
            assert_eq!(go_proxy(goproxy).as_deref(), url, "{goproxy}");
        }
        assert!(
            matches!(&plan("off", None, None)[0], Probe::Decided(c) if c.verdict == CheckStatus::Warn)
        );
    }

    #[test]
    fn apt_sources_give_the_first_deb_uri_in_either_format() {
        assert_eq!(
            debian_one_line(include_str!("../fixtures/sources.list")).as_deref(),
            Some("http://ftp.de.debian.org/debian/")
        );
        assert_eq!(
            debian_deb822(include_str!("../fixtures/debian.sources")).as_deref(),
            Some("http://deb.debian.org/debian")
        );
        let cases = [
            ("deb-src http://a/debian bookworm main\n", None),
            ("# deb http://a/debian bookworm main\n", None),
            (
                "deb\thttps://b/debian bookworm main\n",
                Some("https://b/debian"),
            ),
            ("deb cdrom:[Debian]/ bookworm main\n", None),
        ];
        for (text, uri) in cases {
            assert_eq!(debian_one_line(text).as_deref(), uri, "{text}");
        }
        let disabled = "Types: deb\nURIs: http://off/debian\nEnabled: no\n\nTypes: deb-src deb\nURIs: http://on/debian\n";
        assert_eq!(debian_deb822(disabled).as_deref(), Some("http://on/debian"));
        assert_eq!(
            debian_deb822("Types: deb-src\nURIs: http://src/debian\n"),
            None
        );
    }

    #[test]
    fn any_http_status_answers_and_curl_failing_fails() {
        let registry = Registry {
            name: "pypi",
            url: DEFAULT_PYPI.into(),
            feeds: "wheels",
        };
        let curl = |code, stdout: &str, stderr: &str| Ran::Exited {
            code: Some(code),
            stdout: stdout.into(),
            stderr: stderr.into(),
        };
        let cases = [
            (
                curl(0, "200 0.183", ""),
                CheckStatus::Ok,
                "https://pypi.org/simple/pip/ answers (HTTP 200, 0.2 s): wheels",
            ),
            (
                curl(0, "403 0.05", ""),
                CheckStatus::Ok,
                "https://pypi.org/simple/pip/ answers (HTTP 403, 0.1 s): wheels",
            ),
            (
                curl(6, "000 0.0", "curl: (6) Could not resolve host: pypi.org\n"),
                CheckStatus::Fail,
                "https://pypi.org/simple/pip/ does not answer (exited with 6: curl: (6) Could not \
                 resolve host: pypi.org): wheels",
            ),
            (
                Ran::TimedOut(15),
                CheckStatus::Fail,
                "https://pypi.org/simple/pip/ does not answer (no answer within 15 s): wheels",
            ),
        ];
        for (ran, verdict, detail) in cases {
            let check = answer(&registry, &ran);
            assert_eq!((check.verdict, check.detail.as_str()), (verdict, detail));
        }
        assert!(
            answer(&registry, &curl(7, "000", "x"))
                .fix
                .expect("fix")
                .contains("proxy settings")
        );
    }
}
