"""The `pipetune` command line (Typer): parse, call the library, print; library errors become usage errors here."""
