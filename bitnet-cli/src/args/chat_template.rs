//! The help of `--chat-template` (chat and serve), naming the built-in templates from the
//! core's own table so the list can never go stale.

/// `--chat-template`'s help: the built-in names as `bitnet_core::chat` has them.
pub fn help() -> String {
    format!(
        "Chat template: a built-in name ({}) or a Jinja file. Default: the file's own, else \
         plain",
        bitnet_core::chat::builtin_names()
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_help_names_every_builtin_template() {
        let help = super::help();
        for t in bitnet_core::chat::BUILTIN_TEMPLATES {
            assert!(help.contains(t.name), "{} missing from {help}", t.name);
        }
    }
}
