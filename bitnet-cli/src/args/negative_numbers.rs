//! A negative number given to a numeric flag (`-c -5`, `--port -1`) is that flag's value,
//! so its parser refuses it with the valid range ("invalid value '-5' for '--ctx-size'"),
//! instead of clap taking `-5` for an unknown flag ("unexpected argument '-5'"). Set here
//! once for every numeric flag of every subcommand, rather than on each flag by hand.

use std::any::TypeId;

use clap::{Arg, Command};

/// The value types of numeric flags.
fn is_numeric(arg: &Arg) -> bool {
    let id = arg.get_value_parser().type_id();
    [
        TypeId::of::<u8>(),
        TypeId::of::<u16>(),
        TypeId::of::<u32>(),
        TypeId::of::<u64>(),
        TypeId::of::<usize>(),
        TypeId::of::<i32>(),
        TypeId::of::<i64>(),
        TypeId::of::<f32>(),
        TypeId::of::<f64>(),
    ]
    .into_iter()
    .any(|t| id == t)
}

/// `cli` with every numeric flag of its subcommands taking negative numbers as values.
pub fn as_values(cli: Command) -> Command {
    let names: Vec<String> = cli
        .get_subcommands()
        .map(|s| s.get_name().to_owned())
        .collect();
    names.into_iter().fold(cli, |cli, name| {
        cli.mut_subcommand(name, |sub| {
            let numeric: Vec<String> = sub
                .get_arguments()
                .filter(|a| !a.is_positional() && is_numeric(a))
                .map(|a| a.get_id().to_string())
                .collect();
            numeric.into_iter().fold(sub, |sub, id| {
                sub.mut_arg(id, |a| a.allow_negative_numbers(true))
            })
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_negative_number_is_a_refused_value_not_an_unknown_flag() {
        let cli = || {
            Command::new("bitnet").subcommand(
                Command::new("generate")
                    .arg(
                        Arg::new("ctx")
                            .short('c')
                            .value_parser(clap::value_parser!(u32).range(0..=100)),
                    )
                    .arg(Arg::new("name").long("name")),
            )
        };
        let err = cli()
            .try_get_matches_from(["bitnet", "generate", "-c", "-5"])
            .unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::UnknownArgument);
        let err = as_values(cli())
            .try_get_matches_from(["bitnet", "generate", "-c", "-5"])
            .unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::ValueValidation);
        assert!(err.to_string().contains("0..=100"), "{err}");
        // A text flag is left as it was.
        let err = as_values(cli())
            .try_get_matches_from(["bitnet", "generate", "--name", "-5"])
            .unwrap_err();
        assert_eq!(err.kind(), clap::error::ErrorKind::UnknownArgument);
    }
}
