keep;
else { keep; }
