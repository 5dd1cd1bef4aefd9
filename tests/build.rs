//! The power-cut layer's preload shim (`src/power/shim.c`) is compiled
//! here into a shared library whose path the crate gets as
//! `AGENT_TESTS_POWERCUT_SHIM`: C, because an interposer of `write` must
//! not bring a second Rust runtime (and its own calls to `write`) into the
//! daemon, and must be built whenever the tests are.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    build_power_shim();
}

fn build_power_shim() {
    println!("cargo:rerun-if-changed=src/power/shim.c");
    let Some(out) = std::env::var_os("OUT_DIR") else {
        panic!("cargo sets OUT_DIR for build scripts");
    };
    let so = std::path::Path::new(&out).join("libpowercut.so");
    let compiler = cc::Build::new().get_compiler();
    let mut cmd = compiler.to_command();
    cmd.args([
        "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror", "-o",
    ])
    .arg(&so)
    .arg("src/power/shim.c")
    .arg("-ldl");
    match cmd.status() {
        Ok(status) if status.success() => {}
        Ok(status) => panic!("compiling src/power/shim.c failed ({status}): {cmd:?}"),
        Err(e) => panic!("cannot run the C compiler ({cmd:?}): {e}"),
    }
    println!("cargo:rustc-env=AGENT_TESTS_POWERCUT_SHIM={}", so.display());
}
