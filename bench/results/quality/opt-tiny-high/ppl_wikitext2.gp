set terminal pngcairo size 800,560 noenhanced
set output '/tmp/opt-high/ppl_wikitext2.png'
set logscale y
set grid
set key top left
set xlabel 'compression ratio (%)'
set ylabel 'perplexity (wikitext2)'
set title 'opt-tiny'
plot 1273.219460433455 title 'dense' with lines dashtype 2 lc rgb 'black', '-' using 1:2 with linespoints title 'asvd-cov', '-' using 1:2 with linespoints title 'asvd-rootcov', '-' using 1:2 with linespoints title 'latentllm', '-' using 1:2 with linespoints title 'plain-svd'
60 1289.9715393392933
80 1364.3321520113295
e
60 1288.3563091121582
80 1324.6182314765256
e
60 1290.589024151172
80 1335.9216806750953
e
60 1364.0679079169286
80 1514.2432432063122
e
