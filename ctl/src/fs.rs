//! `sandboxctl fs ls|stat|rm|mv|mkdir ID PATH…`: the file calls (ListDir, Stat, Remove,
//! Rename, MakeDir) as the sandbox's user or `--user`. Paths are taken as the shell gives them
//! (any bytes) and names are printed as their bytes, so odd names survive both ways; `-0` ends
//! each `ls` line with NUL instead of a newline, for names that hold newlines.

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, UNIX_EPOCH};

use clap::{Args, Subcommand};
use sandboxd_client::{Client, FileEntry, FileType, ListDirOptions, MakeDirOptions};

use crate::error::CtlError;

#[derive(Debug, Args)]
pub struct FsArgs {
    #[command(subcommand)]
    command: FsCommand,
}

#[derive(Debug, Subcommand)]
enum FsCommand {
    /// List a directory: type and mode, owner, size, modification time, path.
    Ls(LsArgs),
    /// Print one path's entry (of a link itself unless -L).
    Stat(StatArgs),
    /// Remove a file, link or empty directory (-r: a whole tree).
    Rm(RmArgs),
    /// Move SRC to DST within the sandbox (-f: replace an existing DST).
    Mv(MvArgs),
    /// Make a directory (-p: with its parents; an existing one is fine).
    Mkdir(MkdirArgs),
}

#[derive(Debug, Args)]
struct LsArgs {
    /// The sandbox.
    sandbox_id: String,
    /// An absolute directory.
    path: OsString,
    /// Levels to list (1: the directory's own entries).
    #[arg(long, short = 'd', default_value_t = 1)]
    depth: u32,
    /// Also names starting with `.`.
    #[arg(long, short = 'a')]
    all: bool,
    /// End each line with NUL (for names with newlines).
    #[arg(short = '0', long = "null")]
    null: bool,
    /// Act as this user (name, uid, user:group).
    #[arg(long, short = 'u')]
    user: Option<String>,
}

#[derive(Debug, Args)]
struct StatArgs {
    sandbox_id: String,
    path: OsString,
    /// Describe what a link points to.
    #[arg(long, short = 'L')]
    follow: bool,
    #[arg(long, short = 'u')]
    user: Option<String>,
}

#[derive(Debug, Args)]
struct RmArgs {
    sandbox_id: String,
    path: OsString,
    /// A directory with everything in it.
    #[arg(long, short = 'r')]
    recursive: bool,
    #[arg(long, short = 'u')]
    user: Option<String>,
}

#[derive(Debug, Args)]
struct MvArgs {
    sandbox_id: String,
    source: OsString,
    destination: OsString,
    /// Replace an existing destination.
    #[arg(long, short = 'f')]
    force: bool,
    #[arg(long, short = 'u')]
    user: Option<String>,
}

#[derive(Debug, Args)]
struct MkdirArgs {
    sandbox_id: String,
    path: OsString,
    /// Make missing parents; an existing directory is success.
    #[arg(long, short = 'p')]
    parents: bool,
    /// Permission bits in octal (default 755).
    #[arg(long, short = 'm', value_parser = parse_mode)]
    mode: Option<u32>,
    #[arg(long, short = 'u')]
    user: Option<String>,
}

fn parse_mode(s: &str) -> Result<u32, String> {
    u32::from_str_radix(s, 8)
        .ok()
        .filter(|m| *m <= 0o7777)
        .ok_or_else(|| format!("{s:?} is not an octal mode up to 7777"))
}

pub async fn run(client: &Client, args: FsArgs) -> Result<i32, CtlError> {
    let mut out = std::io::stdout().lock();
    match args.command {
        FsCommand::Ls(a) => {
            let options = ListDirOptions { depth: a.depth, include_hidden: a.all, user: a.user };
            let mut stream = client.list_dir(a.sandbox_id, PathBuf::from(a.path), options).await?;
            while let Some(batch) = stream.next_batch().await? {
                for entry in batch {
                    write_entry(&mut out, &entry, if a.null { b'\0' } else { b'\n' })?;
                }
            }
        }
        FsCommand::Stat(a) => {
            let entry = client.stat(a.sandbox_id, PathBuf::from(a.path), a.follow, a.user.as_deref()).await?;
            write_entry(&mut out, &entry, b'\n')?;
        }
        FsCommand::Rm(a) => {
            client.remove(a.sandbox_id, PathBuf::from(a.path), a.recursive, a.user.as_deref()).await?;
        }
        FsCommand::Mv(a) => {
            let (from, to) = (PathBuf::from(a.source), PathBuf::from(a.destination));
            client.rename(a.sandbox_id, from, to, a.force, a.user.as_deref()).await?;
        }
        FsCommand::Mkdir(a) => {
            let options = MakeDirOptions { parents: a.parents, mode: a.mode.unwrap_or(0), user: a.user };
            client.make_dir(a.sandbox_id, PathBuf::from(a.path), options).await?;
        }
    }
    out.flush()?;
    Ok(0)
}

/// `drwxr-xr-x 0:0 4096 2026-12-01T12:00:00Z /path[ -> target]`, the path as its bytes.
fn write_entry(out: &mut impl Write, e: &FileEntry, end: u8) -> std::io::Result<()> {
    let kind = match e.file_type {
        FileType::Dir => 'd',
        FileType::Symlink => 'l',
        FileType::File => '-',
        FileType::Other => '?',
    };
    let mtime = UNIX_EPOCH + Duration::from_millis(e.mtime_ms.max(0) as u64);
    write!(
        out,
        "{kind}{} {}:{} {} {} ",
        rwx(e.mode),
        e.uid,
        e.gid,
        e.size,
        humantime::format_rfc3339_seconds(mtime)
    )?;
    out.write_all(&e.path)?;
    if e.file_type == FileType::Symlink {
        out.write_all(b" -> ")?;
        out.write_all(&e.link_target)?;
    }
    out.write_all(&[end])
}

/// `rwxr-x---` with set-id and sticky bits as `ls` shows them.
fn rwx(mode: u32) -> String {
    let mut s: Vec<char> = "rwxrwxrwx"
        .chars()
        .enumerate()
        .map(|(i, c)| if mode & (0o400 >> i) != 0 { c } else { '-' })
        .collect();
    for (bit, at, on, off) in [(0o4000, 2, 's', 'S'), (0o2000, 5, 's', 'S'), (0o1000, 8, 't', 'T')] {
        if mode & bit != 0 {
            s[at] = if s[at] == 'x' { on } else { off };
        }
    }
    s.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_read_like_ls() {
        assert_eq!(rwx(0o755), "rwxr-xr-x");
        assert_eq!(rwx(0o4755), "rwsr-xr-x");
        assert_eq!(rwx(0o1777), "rwxrwxrwt");
        assert_eq!(rwx(0o2640), "rw-r-S---");
        assert_eq!(parse_mode("700"), Ok(0o700));
        assert!(parse_mode("9").is_err() && parse_mode("17777").is_err());
    }
}
