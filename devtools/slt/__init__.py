"""Distributed sqllogictest: DataFusion's `.slt` files run in DataFusion and through a
DistributedContext side by side, every record classified.

    python -m devtools.slt -h

`cli` is the command line, `runner` runs files in lockstep, `engines` are the two sides,
`compare` classifies a record, `expected` checks the reference against the file's own text,
`parser` reads the files.
"""
