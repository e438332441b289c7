//! The man pages and shell completions an install writes, generated from
//! the command line's own clap definitions (the `clap::Command` the crate
//! root passes in), so they say what `--help` says: `wbcache.1` and one
//! page per visible subcommand (`wbcache-run.1`, ...; hidden ones such as
//! the bench's worker have none) with `clap_mangen`, and the bash, zsh
//! and fish completions with `clap_complete`. Nothing here touches the
//! file system: the pages are returned as items to stage.

use std::path::Path;

use clap::Command;
use clap_complete::Shell;

use super::staging::{Content, Item};

/// The version the pages name.
const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Where each shell's completion goes under the prefix, where the shell
/// (or bash-completion) looks for it.
const COMPLETIONS: [(Shell, &str); 3] = [
    (Shell::Bash, "share/bash-completion/completions/wbcache"),
    (Shell::Zsh, "share/zsh/site-functions/_wbcache"),
    (Shell::Fish, "share/fish/vendor_completions.d/wbcache.fish"),
];

/// The man pages of `command` and of each visible subcommand (at any
/// depth), under `prefix/share/man/man1`.
pub fn man_pages(command: Command, prefix: &Path) -> Result<Vec<Item>, String> {
    // `help` is clap's, not a command of ours; building names each
    // subcommand `wbcache-NAME` for its page and `wbcache NAME` for its
    // synopsis.
    let mut command = command.disable_help_subcommand(true);
    command.build();
    let mut commands = vec![command.clone()];
    let mut pages = Vec::new();
    while let Some(command) = commands.pop() {
        commands.extend(command.get_subcommands().filter(|s| !s.is_hide_set()).cloned());
        let man = clap_mangen::Man::new(command).source(format!("wbcache {VERSION}")).manual("wbcache manual");
        let mut page = Vec::new();
        man.render(&mut page).map_err(|e| format!("cannot write the man page {}: {e}", man.get_filename()))?;
        pages
            .push(Item { path: prefix.join("share/man/man1").join(man.get_filename()), content: Content::Bytes(page) });
    }
    pages.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(pages)
}

/// The completion scripts for bash, zsh and fish, each where the shell
/// finds it under `prefix`; hidden subcommands are not offered.
pub fn completions(command: Command, prefix: &Path) -> Vec<Item> {
    let mut command = without_hidden_subcommands(command);
    let name = command.get_name().to_string();
    COMPLETIONS
        .into_iter()
        .map(|(shell, place)| {
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut command, &name, &mut script);
            Item { path: prefix.join(place), content: Content::Bytes(script) }
        })
        .collect()
}

/// `command` without its hidden subcommands, at any depth: clap has no
/// way to remove one and `clap_complete` offers them, so a command that
/// has any is rebuilt from its name, version, texts, arguments and
/// visible subcommands (before `build`, its arguments are its own).
fn without_hidden_subcommands(command: Command) -> Command {
    fn has_hidden(command: &Command) -> bool {
        command.get_subcommands().any(|s| s.is_hide_set() || has_hidden(s))
    }
    if !has_hidden(&command) {
        return command;
    }
    let mut visible = Command::new(command.get_name().to_string())
        .args(command.get_arguments().cloned())
        .subcommands(command.get_subcommands().filter(|s| !s.is_hide_set()).cloned().map(without_hidden_subcommands))
        .subcommand_required(command.is_subcommand_required_set())
        .arg_required_else_help(command.is_arg_required_else_help_set());
    if let Some(version) = command.get_version() {
        visible = visible.version(version.to_string());
    }
    if let Some(about) = command.get_about() {
        visible = visible.about(about.clone());
    }
    if let Some(about) = command.get_long_about() {
        visible = visible.long_about(about.clone());
    }
    visible
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Command {
        Command::new("tool")
            .version("1.0")
            .about("A tool")
            .subcommand(Command::new("go").about("Go somewhere").arg(clap::Arg::new("fast").long("fast")))
            .subcommand(Command::new("stop").about("Stop"))
            .subcommand(Command::new("worker").hide(true))
    }

    fn names(items: &[Item]) -> Vec<String> {
        items.iter().map(|i| i.path.display().to_string()).collect()
    }

    #[test]
    fn each_visible_subcommand_has_a_page() {
        let pages = man_pages(sample(), Path::new("/p")).unwrap();
        assert_eq!(
            names(&pages),
            ["/p/share/man/man1/tool-go.1", "/p/share/man/man1/tool-stop.1", "/p/share/man/man1/tool.1"]
        );
        let Content::Bytes(go) = &pages[0].content else { panic!("a page is text") };
        let go = String::from_utf8_lossy(go);
        assert!(go.contains(".TH tool-go 1 ") && go.contains("tool go"), "titled tool-go, run as `tool go`: {go}");
        assert!(go.contains("fast") && go.contains("Go somewhere"), "{go}");
    }

    #[test]
    fn each_shell_has_its_completion() {
        let scripts = completions(sample(), Path::new("/p"));
        assert_eq!(
            names(&scripts),
            [
                "/p/share/bash-completion/completions/wbcache",
                "/p/share/zsh/site-functions/_wbcache",
                "/p/share/fish/vendor_completions.d/wbcache.fish"
            ]
        );
        let Content::Bytes(bash) = &scripts[0].content else { panic!("a script is text") };
        let bash = String::from_utf8_lossy(bash);
        assert!(bash.contains("complete -F"), "a bash completion function");
        assert!(bash.contains("opts=\"-h -V --help --version go stop help\""), "no hidden subcommand: {bash}");
    }
}
