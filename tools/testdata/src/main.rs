//! `cargo run -p bitnet-testdata`: makes the unpacked copy of `testdata/` current (in the
//! target directory, or `$BITNET_TESTDATA`) and prints its folder, for scripts and Python
//! tools that read the archived files. Tests need not run it: they unpack on first use.

use anyhow::Context;

fn main() -> anyhow::Result<()> {
    let (source, dest) = (
        bitnet_testdata::source_dir(),
        bitnet_testdata::default_dest(),
    );
    let start = std::time::Instant::now();
    let outcome = bitnet_testdata::unpack(&source, &dest)
        .with_context(|| format!("unpacking {} into {}", source.display(), dest.display()))?;
    match outcome {
        bitnet_testdata::Outcome::Current => eprintln!("test data current in {}", dest.display()),
        bitnet_testdata::Outcome::Unpacked { files } => eprintln!(
            "test data: {files} files unpacked into {} in {:.1} s",
            dest.display(),
            start.elapsed().as_secs_f64()
        ),
    }
    println!("{}", dest.display());
    Ok(())
}
