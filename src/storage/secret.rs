//! Where the server's secret comes from: 32 bytes from the operating system, kept in
//! `DIR/__azq__/SECRET` (mode 0600, written once and synced) when the server keeps its data, so
//! the message IDs and pop receipts it handed out stay valid across restarts and changes of
//! shard count; made afresh at start-up in memory-only mode, where nothing outlives the process.

use std::io::Write as _;
use std::path::Path;

use crate::queue::secret::SECRET_BYTES;
use crate::queue::Secret;

/// The file in the data directory that holds the secret.
pub const SECRET_FILE_NAME: &str = "SECRET";

/// Fresh random bytes for a secret, from the operating system.
fn random_bytes() -> Result<[u8; SECRET_BYTES], String> {
    let mut bytes = [0u8; SECRET_BYTES];
    getrandom::fill(&mut bytes)
        .map_err(|error| format!("the operating system's random source: {error}"))?;
    Ok(bytes)
}

/// A secret for a server that keeps nothing: random, never written anywhere.
pub fn random() -> Result<Secret, String> {
    Ok(Secret::from_bytes(&random_bytes()?))
}

/// The secret kept in the data directory `root` (which the caller has locked), made and written
/// first if there is none. A file of another length is an error, never replaced: replacing it
/// would silently invalidate every receipt and change every stored message's ID.
pub fn load_or_create(root: &Path) -> Result<Secret, String> {
    let path = root.join(SECRET_FILE_NAME);
    let failed = |error: std::io::Error| format!("{}: {error}", path.display());
    match std::fs::read(&path) {
        Ok(bytes) => {
            let bytes: [u8; SECRET_BYTES] = bytes.try_into().map_err(|bytes: Vec<u8>| {
                format!(
                    "{}: {} bytes, not {SECRET_BYTES}",
                    path.display(),
                    bytes.len()
                )
            })?;
            restrict(&path).map_err(failed)?;
            return Ok(Secret::from_bytes(&bytes));
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => return Err(failed(error)),
    }
    let bytes = random_bytes()?;
    // Written under another name and renamed, so a crash never leaves a short SECRET behind.
    let partial = root.join(format!("{SECRET_FILE_NAME}.partial"));
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(&partial).map_err(failed)?;
    restrict(&partial).map_err(failed)?;
    file.write_all(&bytes).map_err(failed)?;
    file.sync_all().map_err(failed)?;
    std::fs::rename(&partial, &path).map_err(failed)?;
    std::fs::File::open(root)
        .and_then(|directory| directory.sync_all())
        .map_err(failed)?;
    Ok(Secret::from_bytes(&bytes))
}

/// Makes `path` readable and writable by its owner alone (a file made under a looser umask by an
/// earlier version, or copied, is tightened).
fn restrict(path: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(path)?.permissions().mode();
        if mode & 0o077 != 0 {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
        }
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_secret_is_made_once_kept_private_and_read_back() {
        let root = std::env::temp_dir().join(format!("azq-secret-{}", std::process::id()));
        std::fs::create_dir_all(&root).unwrap();
        let first = load_or_create(&root).unwrap();
        let again = load_or_create(&root).unwrap();
        assert_eq!(first, again);
        assert_ne!(first, random().unwrap());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let path = root.join(SECRET_FILE_NAME);
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
            assert_eq!(load_or_create(&root).unwrap(), first);
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        std::fs::write(root.join(SECRET_FILE_NAME), b"short").unwrap();
        let refused = load_or_create(&root).unwrap_err();
        assert!(refused.contains("5 bytes, not 32"), "{refused}");
        std::fs::remove_dir_all(&root).unwrap();
    }
}
