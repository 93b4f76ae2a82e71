require ["fileinto", "variables"];
if anyof (header :contains "subject" "x", header :matches "subject" "* *") {
  if allof (header :matches "from" "*@*", true) {
    fileinto "N/${2}";
  } else { fileinto "Else"; }
} elsif true { fileinto "Elsif"; }
