//! Compiles `agent/v1/*.proto` with protox (pure Rust, so no system `protoc`
//! is needed) and writes the file descriptor set used by gRPC reflection.

use prost::Message;
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let proto_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let files = ["agent/v1/agent.proto"];
    for file in files {
        println!("cargo:rerun-if-changed={}", proto_dir.join(file).display());
    }
    let fds = protox::compile(files, [&proto_dir])?;
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out_dir.join("agent_descriptor.bin"), fds.encode_to_vec())?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_fds(fds)?;
    Ok(())
}
