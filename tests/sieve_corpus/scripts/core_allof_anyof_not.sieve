require "fileinto";
if allof (exists ["from", "to"], not exists "x-nothing", anyof (false, true)) { fileinto "All"; }
if anyof (header :contains "from" "nobody", not true) { fileinto "Never"; }
if not allof (true, false) { fileinto "NotAll"; }
