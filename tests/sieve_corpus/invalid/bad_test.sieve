if frob "a" { keep; }
