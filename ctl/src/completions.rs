//! `sandboxctl completions bash|zsh|fish`: a completion script for the shell, generated from
//! the command-line definition itself (`clap_complete`), so it never falls behind it.

use clap::{Args, CommandFactory};
use clap_complete::Shell;

#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell: `source <(sandboxctl completions bash)`; for zsh put the output in a file
    /// named `_sandboxctl` on `$fpath`; for fish in `~/.config/fish/completions/sandboxctl.fish`.
    #[arg(value_parser = ["bash", "zsh", "fish"])]
    shell: String,
}

pub fn run(args: CompletionsArgs) -> i32 {
    let shell = match args.shell.as_str() {
        "zsh" => Shell::Zsh,
        "fish" => Shell::Fish,
        _ => Shell::Bash,
    };
    let mut command = crate::Cli::command();
    clap_complete::generate(shell, &mut command, "sandboxctl", &mut std::io::stdout());
    0
}
