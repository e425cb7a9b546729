//! Gives the shared library its SONAME, as cargo-c does: `libundertext.so.<sover>`, where the
//! ABI version `sover` is the major version, or `0.<minor>` before 1.0 (where a minor release
//! may break the ABI). `scripts/install-c` installs `libundertext.so.<version>` with the
//! `libundertext.so.<sover>` and `libundertext.so` links; a program linked against it records
//! the SONAME and loads any later library of the same ABI version.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    let (major, minor, patch) =
        (var("CARGO_PKG_VERSION_MAJOR"), var("CARGO_PKG_VERSION_MINOR"), var("CARGO_PKG_VERSION_PATCH"));
    let sover = match (major.as_str(), minor.as_str()) {
        ("0", "0") => format!("0.0.{patch}"),
        ("0", _) => format!("0.{minor}"),
        _ => major,
    };
    // ELF platforms only (macOS names a library by its install name instead).
    let os = var("CARGO_CFG_TARGET_OS");
    if matches!(os.as_str(), "linux" | "android" | "freebsd" | "netbsd" | "openbsd" | "dragonfly" | "illumos")
    {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libundertext.so.{sover}");
    }
}
