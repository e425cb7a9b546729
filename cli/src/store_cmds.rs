//! `stats`, `check`, `gc`.

use serde_json::json;
use undertext::import::inventory;

use super::args::{CheckArgs, DeleteArgs, GcArgs, JsonArg};
use super::out::{self, bytes, num};
use super::{Cli, CliError, CliResult};

/// `stats`: store sizes, and what the owner's chats hold.
pub fn stats(cli: &Cli, a: &JsonArg) -> CliResult {
    let store = out::open_for_reading(cli)?;
    let s = store.stats()?;
    let inv = inventory(&store, &cli.owner)?;
    let dedup = if inv.archive_unique_bytes == 0 {
        1.0
    } else {
        inv.archived_bytes as f64 / inv.archive_unique_bytes as f64
    };
    if a.json {
        let per_format: serde_json::Map<String, serde_json::Value> = inv
            .per_format
            .iter()
            .map(|(k, f)| {
                let name = if k.is_empty() { "(not imported)".to_string() } else { k.clone() };
                (name, json!({"sessions": f.sessions, "messages": f.messages, "tool_results": f.tool_results, "tool_result_bytes": f.tool_result_bytes}))
            })
            .collect();
        return out::print_json(&json!({
            "store": cli.store.display().to_string(), "owner": cli.owner,
            "segments": s.segments, "log_bytes": s.log_bytes, "log_file_bytes": s.log_file_bytes,
            "index_bytes": s.index_bytes, "indexed_blobs": s.indexed_blobs,
            "chats": inv.chats, "messages": inv.messages, "tool_results": inv.tool_results,
            "archived_results": inv.archived_results, "archives": inv.archives,
            "archived_bytes": inv.archived_bytes, "archive_unique_bytes": inv.archive_unique_bytes,
            "dedup_ratio": dedup, "per_format": per_format,
        }));
    }
    println!("store {}  (owner {:?})", cli.store.display(), cli.owner);
    println!(
        "  log        {} in {} segment(s) ({} of files, preallocation included)",
        bytes(s.log_bytes),
        s.segments,
        bytes(s.log_file_bytes)
    );
    println!("  index      {}  ({} blobs indexed)", bytes(s.index_bytes), num(s.indexed_blobs));
    println!(
        "  chats      {}  messages {}  tool results {}",
        num(inv.chats),
        num(inv.messages),
        num(inv.tool_results)
    );
    println!(
        "  archives   {} results archived → {} distinct archives; {} → {} stored (dedup {dedup:.2}×)",
        num(inv.archived_results),
        num(inv.archives),
        bytes(inv.archived_bytes),
        bytes(inv.archive_unique_bytes)
    );
    for (k, f) in &inv.per_format {
        let name = if k.is_empty() { "(not imported)" } else { k };
        println!(
            "  {name:<16} sessions {:>5}  messages {:>7}  tool results {:>6}",
            num(f.sessions),
            num(f.messages),
            num(f.tool_results)
        );
    }
    Ok(())
}

/// `check [--rebuild]`: every checksum of the log, and the index against the log; non-zero
/// exit when something is damaged. With `--rebuild` and an intact log, the index is rebuilt
/// from the log into a fresh file (also when the index is too damaged for the store to open).
pub fn check(cli: &Cli, a: &CheckArgs) -> CliResult {
    if a.rebuild && cli.read_only {
        return Err(CliError("check --rebuild writes a new index, and --read-only was given".into()));
    }
    let opened = if cli.read_only {
        out::open_read_only(cli).map_err(|e| undertext::Error::InvalidArgument(e.0))
    } else {
        undertext::Store::open(
            &cli.store,
            undertext::Options::default().create_if_missing(false).durability(undertext::Durability::Group),
        )
    };
    let (store, unopened) = match opened {
        Ok(s) => (s, None),
        Err(undertext::Error::InvalidArgument(why)) if cli.read_only => return Err(CliError(why)),
        // Another process writes the store: check what it has written, read-only (the log
        // only: the index is in use by the writer).
        Err(undertext::Error::Locked { .. }) if !a.rebuild => (out::open_for_reading(cli)?, None),
        // The store cannot be written here (a read-only file system, no write permission):
        // check what it holds, read-only.
        Err(e) if e.is_unwritable() && !a.rebuild => {
            out::unwritable_note(cli, &e);
            (out::open_read_only(cli)?, None)
        }
        // The store does not open because its index is damaged: that is what `check` reports,
        // and what `--rebuild` repairs, from the log alone.
        Err(undertext::Error::Index { message: why, .. }) => {
            if !a.rebuild {
                return index_unopened(a, &why);
            }
            undertext::Store::rebuild_index_at(&cli.store, undertext::Options::default())?;
            (out::open_existing(cli)?, Some(why))
        }
        Err(_) => (out::open_existing(cli)?, None),
    };
    // After a rebuild at open, the report is that of the rebuilt index (the damage that kept
    // the store from opening is reported with it).
    let r = store.check()?;
    let rebuilt = a.rebuild && r.problems.is_empty();
    if rebuilt && unopened.is_none() {
        store.rebuild_index()?;
    }
    if a.json {
        out::print_json(&json!({
            "ok": r.problems.is_empty() && (rebuilt || r.index_problems.is_empty()),
            "segments": r.segments, "batches": r.batches, "records": r.records, "blobs": r.blobs,
            "rebuilt": rebuilt,
            "problems": r.problems.iter().map(|p| json!({"segment": p.segment, "offset": p.offset, "reason": p.reason})).collect::<Vec<_>>(),
            "index_problems": unopened.iter().cloned().chain(r.index_problems.iter().cloned()).collect::<Vec<_>>(),
        }))?;
    } else {
        println!(
            "{} segment(s), {} batches, {} records, {} blobs verified",
            num(r.segments),
            num(r.batches),
            num(r.records),
            num(r.blobs)
        );
        for p in &r.problems {
            println!("  damaged: segment {} offset {}: {}", p.segment, p.offset, p.reason);
        }
        if let Some(why) = &unopened {
            println!("  index damaged: {why}");
        }
        for p in &r.index_problems {
            println!("  index differs from the log: {p}");
        }
        if rebuilt {
            println!("index rebuilt from the log");
        }
    }
    if !r.problems.is_empty() {
        return Err(CliError(format!(
            "{} damaged frame(s) in the log{}",
            r.problems.len(),
            if a.rebuild { "; index not rebuilt" } else { "" }
        )));
    }
    if !r.index_problems.is_empty() && !rebuilt {
        return Err(CliError(format!(
            "the index differs from the log in {} place(s); the log is intact: run `undertext check --rebuild`",
            r.index_problems.len()
        )));
    }
    if !a.json {
        println!("clean");
    }
    Ok(())
}

/// `check` of a store whose index is too damaged to open, without `--rebuild`.
fn index_unopened(a: &CheckArgs, why: &str) -> CliResult {
    if a.json {
        out::print_json(&json!({
            "ok": false, "rebuilt": false, "problems": [], "index_problems": [why],
        }))?;
    } else {
        println!("  index damaged: {why}");
    }
    Err(CliError("the index is damaged; the log was not checked: run `undertext check --rebuild`".into()))
}

/// `gc`: rewrites the log without deleted chats and the blobs only they used (offline: the
/// store must not be open elsewhere); on a fleet URL, collects online (`Store::gc`).
pub fn gc(cli: &Cli, a: &GcArgs) -> CliResult {
    let mut opts = undertext::Options::default().create_if_missing(false);
    if let Some(secs) = a.grace {
        opts = opts.gc_grace(std::time::Duration::from_secs(secs));
    }
    let r = undertext::Store::gc(&cli.store, opts).map_err(|e| match e {
        undertext::Error::NotFound { .. } => CliError(format!(
            "no store at {} (run `undertext demo` or `undertext import PATH` to create one, or pass --store DIR)",
            cli.store.display()
        )),
        other => other.into(),
    })?;
    if a.json {
        return out::print_json(&json!({
            "deleted_chats": r.deleted_chats, "records_before": r.records_before, "records_after": r.records_after,
            "blobs_removed": r.blobs_removed, "log_bytes_before": r.log_bytes_before, "log_bytes_after": r.log_bytes_after,
            "erased_versions": r.erased_versions,
        }));
    }
    println!(
        "gc: {} deleted chat(s) dropped, {} message version(s) erased, {} blob(s) removed; records {} → {}; log {} → {}",
        num(r.deleted_chats),
        num(r.erased_versions),
        num(r.blobs_removed),
        num(r.records_before),
        num(r.records_after),
        bytes(r.log_bytes_before),
        bytes(r.log_bytes_after)
    );
    Ok(())
}

/// `delete CHAT…`: deletes chats of the owner (their space comes back with `gc`).
pub fn delete(cli: &Cli, a: &DeleteArgs) -> CliResult {
    let store = out::open_existing(cli)?;
    for c in &a.chats {
        let id = out::chat(cli, &store, c)?.id();
        store.delete_chat(&cli.owner, id)?;
        println!("deleted {id}");
    }
    store.close()?;
    Ok(())
}

/// `fleet status|init|migrate`: the schema of the fleet database named by `--store`.
#[cfg(feature = "fleet")]
pub fn fleet(cli: &Cli, cmd: &crate::args::FleetCommand) -> CliResult {
    use crate::args::FleetCommand;
    let url =
        cli.store.to_str().filter(|u| undertext::fleet::is_fleet_url(std::path::Path::new(u))).ok_or_else(
            || {
                CliError(format!(
                    "fleet: --store {} is not a PostgreSQL URL (expected --store postgres://user@host/db)",
                    cli.store.display()
                ))
            },
        )?;
    let (json, done) = match cmd {
        FleetCommand::Status(a) => (a.json, None),
        FleetCommand::Init(a) => (a.json, Some(("init", undertext::fleet::init(url)?))),
        FleetCommand::Migrate(a) => (a.json, Some(("migrate", undertext::fleet::migrate(url)?))),
    };
    let s = undertext::fleet::schema_status(url)?;
    if json {
        return out::print_json(&json!({
            "database": s.database, "recorded": s.recorded, "compatible_from": s.compatible_from,
            "build": s.build, "usable": s.usable(),
            "before": done.map(|(_, (b, _))| b), "after": done.map(|(_, (_, a))| a),
        }));
    }
    match done {
        Some((what, (before, after))) if before == after => {
            println!("{what}: nothing to do: the schema is at version {after}")
        }
        Some((what, (0, after))) => println!("{what}: created the schema at version {after}"),
        Some((what, (before, after))) => {
            println!("{what}: migrated the schema from version {before} to {after}")
        }
        None => {}
    }
    let state = if s.database == 0 {
        "no Undertext schema: run `undertext --store URL fleet init`".to_string()
    } else if s.database < s.build && s.usable() {
        format!("usable; `fleet migrate` adds what versions {}..={} bring", s.database + 1, s.build)
    } else if s.usable() {
        "usable".to_string()
    } else if s.database < undertext::fleet::MIN_USABLE {
        "too old for this build: run `undertext --store URL fleet migrate`".to_string()
    } else {
        format!("needs builds of schema version {} or newer: upgrade undertext", s.compatible_from)
    };
    println!(
        "schema: database version {}{}, this build's {}: {state}",
        s.database,
        if s.database > 0 && !s.recorded { " (created before versions were recorded)" } else { "" },
        s.build
    );
    Ok(())
}
