require ["vacation", "variables"];
if header :matches "subject" "*" { set "subj" "${1}"; }
vacation :from "user@example.com" :handle "away-2020" :subject "Re: ${subj}" "Back soon.";
