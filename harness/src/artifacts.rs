//! Flux artifacts served over HTTP, as source-controller serves them: a
//! gzipped tarball of manifests per revision, fetched by
//! kustomize-controller from an `ExternalArtifact`'s `status.artifact.url`
//! and checked against its `digest` (sha256) before it is unpacked. The
//! server runs in the process that publishes (the chain runner, a test),
//! on the host end of the cluster's veth, which the node's network
//! namespace reaches: nothing listens outside the cluster's link, and
//! nothing is left when the process ends.
//!
//! Owns: the tarballs (in memory, by path) and the listener, stopped when
//! the [`ArtifactServer`] drops. Must not touch: the cluster (what points
//! at an artifact is the caller's).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

#[derive(Debug, thiserror::Error)]
pub enum ArtifactError {
    #[error("listening on {address}: {source}")]
    Listen {
        address: SocketAddr,
        source: std::io::Error,
    },
}

/// One published artifact, as an `ExternalArtifact`'s `status.artifact`
/// names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Artifact {
    /// The path below the server (`<name>/<sha256>.tar.gz`).
    pub path: String,
    /// Where kustomize-controller fetches it.
    pub url: String,
    /// `sha256:<hex>` of the tarball.
    pub digest: String,
    pub size: u64,
}

/// The tarballs by path.
type Files = Arc<Mutex<HashMap<String, Arc<Vec<u8>>>>>;

/// An HTTP server of artifacts on `address`; stops when dropped.
pub struct ArtifactServer {
    address: SocketAddr,
    files: Files,
    task: JoinHandle<()>,
}

impl Drop for ArtifactServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ArtifactServer {
    /// Listens on an ephemeral port of `ip` (a cluster's
    /// [`host_ip`](crate::layout::Layout::host_ip)).
    pub async fn start(ip: IpAddr) -> Result<Self, ArtifactError> {
        let wanted = SocketAddr::new(ip, 0);
        let listener = TcpListener::bind(wanted)
            .await
            .map_err(|source| ArtifactError::Listen {
                address: wanted,
                source,
            })?;
        let address = listener
            .local_addr()
            .map_err(|source| ArtifactError::Listen {
                address: wanted,
                source,
            })?;
        let files: Files = Arc::default();
        let served = files.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, served.clone()));
            }
        });
        Ok(Self {
            address,
            files,
            task,
        })
    }

    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Publishes `files` (name, content), a tarball of them at the top
    /// level, under `name`; returns where it is and its digest. A tarball
    /// published again under the same name stays served beside it.
    pub fn publish(&self, name: &str, files: &[(&str, &str)]) -> Artifact {
        let tarball = tar_gz(files);
        let hex = sha256_hex(&tarball);
        let path = format!("{name}/{hex}.tar.gz");
        let artifact = Artifact {
            url: format!("http://{}/{path}", self.address),
            digest: format!("sha256:{hex}"),
            size: u64::try_from(tarball.len()).unwrap_or(u64::MAX),
            path: path.clone(),
        };
        self.files
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(path, Arc::new(tarball));
        artifact
    }
}

/// Answers one connection: one request, then closes it.
async fn serve(mut stream: TcpStream, files: Files) {
    let mut head = Vec::new();
    let mut buffer = [0_u8; 1024];
    while !head.windows(4).any(|window| window == b"\r\n\r\n") && head.len() < 16 * 1024 {
        match stream.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(read) => head.extend_from_slice(&buffer[..read]),
        }
    }
    let response = {
        let files = files
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        respond(&String::from_utf8_lossy(&head), |path| {
            files.get(path).cloned()
        })
    };
    let _ = stream.write_all(&response).await;
    let _ = stream.shutdown().await;
}

/// The response to a request's head: `GET` or `HEAD` of a published path
/// (200 with the tarball), else 404 or 405. Pure.
fn respond(head: &str, find: impl Fn(&str) -> Option<Arc<Vec<u8>>>) -> Vec<u8> {
    let mut words = head.lines().next().unwrap_or_default().split_whitespace();
    let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let path = target
        .split('?')
        .next()
        .unwrap_or("")
        .trim_start_matches('/');
    let status = |code: &str, body: &[u8], head_only: bool, kind: &str| {
        let mut response = format!(
            "HTTP/1.1 {code}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        )
        .into_bytes();
        if !head_only {
            response.extend_from_slice(body);
        }
        response
    };
    match (method, find(path)) {
        ("GET" | "HEAD", Some(body)) => status(
            "200 OK",
            &body,
            method == "HEAD",
            "application/octet-stream",
        ),
        ("GET" | "HEAD", None) => status(
            "404 Not Found",
            b"no such artifact\n",
            method == "HEAD",
            "text/plain",
        ),
        _ => status(
            "405 Method Not Allowed",
            b"GET or HEAD\n",
            false,
            "text/plain",
        ),
    }
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// A gzipped ustar archive of `files` (name, content): regular files,
/// mode 0644, owned by root, dated 1970 (the same files give the same
/// bytes, so the same digest). Pure.
pub fn tar_gz(files: &[(&str, &str)]) -> Vec<u8> {
    use flate2::Compression;
    use flate2::write::GzEncoder;
    use std::io::Write;
    let mut tar = Vec::new();
    for (name, content) in files {
        tar.extend_from_slice(&ustar_header(name, content.len()));
        tar.extend_from_slice(content.as_bytes());
        tar.resize(tar.len().next_multiple_of(512), 0);
    }
    // The end of the archive: two empty blocks.
    tar.resize(tar.len() + 1024, 0);
    let mut encoder = GzEncoder::new(Vec::new(), Compression::default());
    // Writing to a Vec cannot fail.
    let _ = encoder.write_all(&tar);
    encoder.finish().unwrap_or_default()
}

/// The 512-byte ustar header of a regular file (POSIX.1-1988): the name
/// (at most 100 bytes), octal mode, ids, size and time, the checksum over
/// the header with its own field as spaces, type `0`, magic `ustar\0` `00`.
fn ustar_header(name: &str, size: usize) -> [u8; 512] {
    let mut header = [0_u8; 512];
    let mut put = |offset: usize, bytes: &[u8]| {
        header[offset..offset + bytes.len()].copy_from_slice(bytes);
    };
    let name = name.as_bytes();
    put(0, &name[..name.len().min(100)]);
    put(100, b"0000644\0");
    put(108, b"0000000\0");
    put(116, b"0000000\0");
    put(124, format!("{size:011o}\0").as_bytes());
    put(136, b"00000000000\0");
    put(148, b"        ");
    put(156, b"0");
    put(257, b"ustar\0");
    put(263, b"00");
    let checksum: u32 = header.iter().map(|byte| u32::from(*byte)).sum();
    header[148..156].copy_from_slice(format!("{checksum:06o}\0 ").as_bytes());
    header
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_answered_by_path_and_method() {
        let tarball = Arc::new(b"tarball".to_vec());
        let find = |path: &str| (path == "app/abc.tar.gz").then(|| tarball.clone());
        let text = |response: Vec<u8>| String::from_utf8_lossy(&response).into_owned();
        let cases = [
            (
                "GET /app/abc.tar.gz HTTP/1.1\r\nHost: x\r\n\r\n",
                "HTTP/1.1 200 OK",
                "\r\n\r\ntarball",
            ),
            (
                "GET /app/abc.tar.gz?x=1 HTTP/1.1\r\n\r\n",
                "HTTP/1.1 200 OK",
                "Content-Length: 7\r\n",
            ),
            (
                "HEAD /app/abc.tar.gz HTTP/1.1\r\n\r\n",
                "HTTP/1.1 200 OK",
                "Content-Length: 7\r\nConnection: close\r\n\r\n",
            ),
            (
                "GET /app/other.tar.gz HTTP/1.1\r\n\r\n",
                "HTTP/1.1 404 Not Found",
                "no such artifact",
            ),
            (
                "PUT /app/abc.tar.gz HTTP/1.1\r\n\r\n",
                "HTTP/1.1 405",
                "GET or HEAD",
            ),
            ("", "HTTP/1.1 405", ""),
        ];
        for (request, status, contains) in cases {
            let response = text(respond(request, find));
            assert!(response.starts_with(status), "{request:?}: {response}");
            assert!(response.contains(contains), "{request:?}: {response}");
        }
        let head = text(respond("HEAD /app/abc.tar.gz HTTP/1.1\r\n\r\n", find));
        assert!(!head.ends_with("tarball"), "{head}");
    }

    /// GNU tar reads what [`tar_gz`] writes, names and contents whole
    /// (a 512-byte file and a longer one cross the block boundaries).
    #[test]
    fn tar_reads_the_archive_back() {
        let long = "x".repeat(1300);
        let exact = "y".repeat(512);
        let files = [
            ("manifests.yaml", "kind: ConfigMap\n"),
            ("long.yaml", long.as_str()),
            ("exact.yaml", exact.as_str()),
        ];
        let dir = tempfile::tempdir().expect("a temporary directory");
        let archive = dir.path().join("a.tar.gz");
        std::fs::write(&archive, tar_gz(&files)).expect("writing the archive");
        let out = dir.path().join("out");
        std::fs::create_dir(&out).expect("mkdir");
        let status = std::process::Command::new("tar")
            .arg("-xzf")
            .arg(&archive)
            .arg("-C")
            .arg(&out)
            .status()
            .expect("running tar");
        assert!(status.success(), "tar -xzf failed: {status}");
        for (name, content) in files {
            assert_eq!(
                std::fs::read_to_string(out.join(name)).expect(name),
                content,
                "{name}"
            );
        }
        assert_eq!(
            tar_gz(&files),
            tar_gz(&files),
            "the same files give the same bytes"
        );
    }

    /// Over a real socket: a published tarball comes back with the length
    /// and digest its artifact says.
    #[tokio::test]
    async fn a_published_artifact_is_served_with_its_digest() {
        let server = ArtifactServer::start(IpAddr::from([127, 0, 0, 1]))
            .await
            .expect("listening");
        let artifact = server.publish("app", &[("m.yaml", "kind: ConfigMap\n")]);
        assert!(
            artifact
                .url
                .starts_with(&format!("http://{}/app/", server.address())),
            "{artifact:?}"
        );
        let mut stream = TcpStream::connect(server.address())
            .await
            .expect("connecting");
        stream
            .write_all(format!("GET /{} HTTP/1.1\r\nHost: x\r\n\r\n", artifact.path).as_bytes())
            .await
            .expect("writing");
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await.expect("reading");
        let split = response
            .windows(4)
            .position(|window| window == b"\r\n\r\n")
            .expect("a head")
            + 4;
        let body = &response[split..];
        assert_eq!(u64::try_from(body.len()).ok(), Some(artifact.size));
        assert_eq!(format!("sha256:{}", sha256_hex(body)), artifact.digest);
    }
}
