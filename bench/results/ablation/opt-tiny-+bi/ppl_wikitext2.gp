set terminal pngcairo size 800,560 noenhanced
set output 'bench/results/ablation/opt-tiny-+bi/ppl_wikitext2.png'
set logscale y
set grid
set key top left
set xlabel 'compression ratio (%)'
set ylabel 'perplexity (wikitext2)'
set title 'opt-tiny'
plot 1273.2194605085567 title 'dense' with lines dashtype 2 lc rgb 'black', '-' using 1:2 with linespoints title 'latentllm'
10 1273.8473252511787
20 1277.4206644382773
30 1279.3535060387774
40 1281.67473138626
e
