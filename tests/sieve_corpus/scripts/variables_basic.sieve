require ["variables", "fileinto"];
set "folder" "Filed";
set :lower "low" "MiXeD";
set :upper "up" "MiXeD";
set :upperfirst "uf" "mixed";
set :lowerfirst "lf" "MIXED";
set :length "len" "twelve chars";
set :quotewildcard "qw" "a*b?c\\";
fileinto "${folder}/${low}-${up}-${uf}-${lf}-${len}";
if string :is "${qw}" "a\\*b\\?c\\\\" { fileinto "Quoted"; }
if string :is "${undefined}" "" { fileinto "Undefined"; }
